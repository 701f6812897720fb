"""The model catalog: every shipped model loads and its shapes reproduce its published size."""
from __future__ import annotations

import copy

import pytest
import yaml

from simulator.inputs.errors import SpecsimError
from simulator.models.spec import KINDS, list_models, load_model, load_model_file

MODELS = list_models()

# A complete, valid model file (OPT-13B's shapes); each bad-file test breaks one thing.
VALID = {
    "name": "tiny", "family": "opt",
    "source": "test fixture",
    "published_params": {"value": 12.85e9, "source": "test fixture"},
    "num_layers": 40, "hidden_size": 5120, "num_heads": 40, "num_kv_heads": 40,
    "head_dim": 128, "ffn_size": 20480, "gated_mlp": False, "vocab_size": 50272,
    "tied_embeddings": True, "learned_position_embeddings": 2050, "norm": "layernorm",
    "bias": True, "dtype": "fp16", "max_context": 2048,
}


def _write(tmp_path, data, name="tiny.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_catalog_holds_the_assigned_models():
    expected = {"opt-125m", "opt-350m", "opt-1.3b", "opt-6.7b", "opt-13b", "opt-30b", "opt-66b",
                "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-68m", "llama-160m",
                "vicuna-7b", "vicuna-13b", "vicuna-33b", "llama-3.1-8b", "llama-3.1-70b",
                "llama-3.2-1b",
                "medusa-vicuna-7b", "medusa-vicuna-13b", "medusa-vicuna-33b",
                "eagle-vicuna-7b", "eagle-vicuna-13b", "eagle-llama-2-7b-chat",
                # issue 15: MoE, MLA and EAGLE-3
                "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b", "kimi-k2",
                "eagle3-llama-3.1-8b-instruct", "eagle3-llama-3.1-70b-instruct"}
    assert expected <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_every_model_loads_under_its_own_name(name):
    spec = load_model(name)
    assert spec.name == name
    assert spec.kind in KINDS
    assert spec.published_params_source and spec.source
    assert spec.q_size == spec.num_heads * spec.head_dim


@pytest.mark.parametrize("name", MODELS)
def test_param_count_within_two_percent_of_published(name):
    spec = load_model(name)
    assert abs(spec.param_count() / spec.published_params - 1) <= 0.02, (
        f"{name}: shapes give {spec.param_count():,}, published {spec.published_params:,.0f}")


@pytest.mark.parametrize("name", [n for n in MODELS if load_model(n).is_moe])
def test_moe_active_params_within_two_percent_of_published(name):
    # the published active figure of each MoE model (its file's published_active_params:
    # paper table or model card); total is checked above for every model
    spec = load_model(name)
    assert spec.published_active_params and spec.published_active_params_source
    assert abs(spec.active_param_count() / spec.published_active_params - 1) <= 0.02, (
        f"{name}: shapes give {spec.active_param_count():,} active, published "
        f"{spec.published_active_params:,.0f}")
    assert spec.active_param_count() < spec.param_count()


@pytest.mark.parametrize("name", [n for n in MODELS if not load_model(n).is_moe])
def test_a_dense_model_computes_with_all_its_parameters(name):
    spec = load_model(name)
    assert spec.active_param_count() == spec.param_count()
    assert spec.published_active_params == 0.0


@pytest.mark.parametrize("name", [n for n in MODELS if load_model(n).kind != "decoder"])
def test_heads_and_draft_layers_match_their_base_model(name):
    spec = load_model(name)
    base = load_model(spec.base_model)
    assert base.kind == "decoder"
    # The head's input is the base's last hidden state and its output the base's vocabulary.
    assert spec.hidden_size == base.hidden_size
    assert spec.vocab_size == base.vocab_size
    # A draft head is a small fraction of what it rides on.
    assert spec.param_count() < 0.2 * base.param_count()


def test_draft_layers_are_one_layer():
    for name in MODELS:
        spec = load_model(name)
        if spec.kind in ("eagle", "eagle3"):
            assert spec.num_layers == 1
        if spec.kind == "medusa":
            assert spec.medusa_num_heads >= 1 and spec.medusa_num_layers == 1
            assert spec.kv_bytes_per_token() == 0.0  # heads have no attention, so no KV


def test_opt_13b_kv_bytes_per_token_is_design_figure():
    # DESIGN.md sec. 4: 2 (K, V) x 40 layers x 5120 x 2 bytes = 819,200 bytes per token.
    assert load_model("opt-13b").kv_bytes_per_token() == 819_200


def test_llama_2_70b_kv_reflects_eight_kv_heads():
    # Llama 2 paper (GQA for 70B) / config.json: 80 layers, 8 KV heads of 128, fp16.
    spec = load_model("llama-2-70b")
    assert spec.num_kv_heads == 8 and spec.num_heads == 64
    assert spec.kv_bytes_per_token() == 2 * 80 * 8 * 128 * 2 == 327_680
    # Full multi-head attention would hold 64 / 8 = 8 times as much.
    assert spec.kv_bytes_per_token() * 8 == 2 * 80 * 8192 * 2


def test_llama_2_7b_has_full_multi_head_kv():
    assert load_model("llama-2-7b").kv_bytes_per_token() == 2 * 32 * 4096 * 2


def test_opt_350m_lm_head_path_costs_what_the_checkpoint_costs():
    # config.json: tokens embedded at 512, project_out 1024 -> 512, tied LM head 512 -> 50272.
    spec = load_model("opt-350m")
    assert spec.lm_head_params() == 512 * 50272 + 1024 * 512


def test_unknown_model_lists_valid_names():
    with pytest.raises(SpecsimError) as err:
        load_model("opt-13c")
    assert err.value.field == "model"
    assert "opt-13c" in str(err.value)
    for name in ("opt-13b", "llama-2-70b", "eagle-vicuna-7b"):
        assert name in str(err.value)


def test_fixture_is_valid(tmp_path):
    assert load_model_file(_write(tmp_path, VALID)).kv_bytes_per_token() == 819_200


_DELETE = object()


def _mutated(**changes):
    data = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is _DELETE:
            del data[key]
        else:
            data[key] = value
    return data


@pytest.mark.parametrize("changes, field", [
    ({"hidden_size": _DELETE}, "hidden_size"),                      # missing field
    ({"hidden_size": -5120}, "hidden_size"),                        # negative size
    ({"num_layers": 0}, "num_layers"),                              # zero size
    ({"vocab_size": "50272"}, "vocab_size"),                        # string for a number
    ({"num_heads": True}, "num_heads"),                             # bool for a number
    ({"hiden_size": 5120}, "hiden_size"),                           # unknown key
    ({"num_kv_heads": 7}, "num_kv_heads"),                          # 40 heads, 7 KV heads
    ({"head_dim": 127.5}, "head_dim"),                              # not a whole number
    ({"published_params": {"value": 1e9}}, "published_params.source"),
    ({"published_params": {"value": "13B", "source": "x"}}, "published_params.value"),
    ({"dtype": "fp12"}, "dtype"),
    ({"kind": "medusa", "medusa_num_heads": 5, "medusa_num_layers": 1}, "base_model"),
])
def test_bad_model_file_names_file_and_field(tmp_path, changes, field):
    path = _write(tmp_path, _mutated(**changes))
    with pytest.raises(SpecsimError) as err:
        load_model(str(path))
    assert err.value.field == field
    assert str(path) in str(err.value)
    assert field in str(err.value)


def test_unknown_key_error_lists_valid_keys(tmp_path):
    path = _write(tmp_path, _mutated(hiden_size=5120))
    with pytest.raises(SpecsimError) as err:
        load_model_file(path)
    assert "hidden_size" in err.value.fix and "num_kv_heads" in err.value.fix


def test_yaml_exponent_without_sign_is_caught(tmp_path):
    # PyYAML reads 1.285e10 (no sign in the exponent) as a string, not a float.
    text = yaml.safe_dump(VALID, sort_keys=False).replace("12850000000.0", "1.285e10")
    path = tmp_path / "tiny.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecsimError) as err:
        load_model_file(path)
    assert err.value.field == "published_params.value"
    assert str(path) in str(err.value)


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nnum_layers: [40\nhidden_size: 5120\n", encoding="utf-8")
    with pytest.raises(SpecsimError) as err:
        load_model_file(path)
    assert str(path) in str(err.value)
    assert "line" in str(err.value)


def test_file_whose_name_disagrees_is_rejected(tmp_path):
    _write(tmp_path, VALID, name="other.yaml")
    with pytest.raises(SpecsimError) as err:
        load_model("other", model_dir=tmp_path)
    assert err.value.field == "name"
    assert "other.yaml" in str(err.value)
