"""``specsim models list|show``: the MoE and MLA fields, and active parameters for MoE."""
from __future__ import annotations

import json

import pytest

from simulator.cli import main


def _json(capsys, *argv):
    assert main([*argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_list_shows_active_parameters_for_moe_models_only(capsys):
    rows = {r["name"]: r for r in _json(capsys, "models", "list")}
    # DeepSeek-V3 report abstract: 671B total, 37B activated (within the catalog's 2%)
    assert rows["deepseek-v3"]["params_b"] == pytest.approx(671, rel=0.02)
    assert rows["deepseek-v3"]["active_b"] == pytest.approx(37, rel=0.02)
    assert rows["mixtral-8x7b"]["active_b"] == pytest.approx(12.9, rel=0.02)
    assert rows["llama-3.1-70b"]["active_b"] is None  # dense: no separate active count
    assert rows["eagle3-llama-3.1-8b-instruct"]["kind"] == "eagle3"


def test_list_table_stays_narrow(capsys):
    assert main(["models", "list"]) == 0
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 120


def test_show_prints_moe_and_mla_fields(capsys):
    fields = {r["field"]: r["value"] for r in _json(capsys, "models", "show", "deepseek-v3")}
    # config.json: 256 routed + 1 shared of 2048, top-8, 3 dense layers; MLA 512 + 64
    for key, value in {"num_experts": "256", "experts_per_token": "8", "shared_experts": "1",
                       "expert_ffn_size": "2048", "dense_layers": "3", "kv_lora_rank": "512",
                       "qk_rope_head_dim": "64", "mtp_modules": "1", "moe_layers": "58",
                       "kv_elements_per_token_layer": "576",
                       "kv_bytes_per_token": "70272.0"}.items():
        assert fields[key] == value
    assert float(fields["active_param_count"]) < 0.06 * float(fields["param_count"])


def test_show_of_a_dense_model_hides_other_kinds_fields(capsys):
    fields = {r["field"] for r in _json(capsys, "models", "show", "llama-3.1-8b")}
    assert {"param_count", "kv_bytes_per_token", "num_kv_heads"} <= fields
    assert not fields & {"num_experts", "kv_lora_rank", "active_param_count",
                         "draft_vocab_size", "mtp_modules", "medusa_num_heads"}


def test_show_of_an_eagle3_head_gives_its_draft_vocabulary(capsys):
    fields = {r["field"]: r["value"]
              for r in _json(capsys, "models", "show", "eagle3-llama-3.1-8b-instruct")}
    # eagle/traineagle3/config.json (SafeAILab/EAGLE): draft_vocab_size 32000, fc fuses 3
    assert fields["draft_vocab_size"] == "32000" and fields["feature_layers"] == "3"
    assert fields["base_model"] == "llama-3.1-8b"
