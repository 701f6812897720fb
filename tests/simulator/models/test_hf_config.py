"""``specsim models from-hf config.json``: a model file from a Hugging Face config (the
configs below are the public ones' keys that matter, copied by hand)."""
from __future__ import annotations

import json

import pytest
import yaml

from simulator.cli import main
from simulator.inputs.errors import SpecsimError
from simulator.models.hf_config import model_from_hf_config
from simulator.models.spec import load_model, model_from_dict

# https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA_31_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
               "max_position_embeddings": 131072, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
               "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256}
# https://huggingface.co/Qwen/Qwen2.5-14B/blob/main/config.json
QWEN25_14B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
              "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 13824,
              "max_position_embeddings": 131072, "num_attention_heads": 40,
              "num_hidden_layers": 48, "num_key_value_heads": 8, "sliding_window": 131072,
              "use_sliding_window": False, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "vocab_size": 152064}
# https://huggingface.co/meta-llama/Llama-3.2-3B/blob/main/config.json
LLAMA_32_3B = dict(LLAMA_31_8B, hidden_size=3072, intermediate_size=8192,
                   num_attention_heads=24, num_hidden_layers=28, head_dim=128,
                   tie_word_embeddings=True)
SHAPES = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "ffn_size",
          "gated_mlp", "vocab_size", "tied_embeddings", "norm", "bias", "dtype",
          "max_context")


def _spec(config, name="m"):
    return model_from_dict(model_from_hf_config(config, name=name, source="config.json"),
                           source="m.yaml")


def test_llama_31_8b_config_gives_the_catalogs_shapes():
    mine, catalog = _spec(LLAMA_31_8B), load_model("llama-3.1-8b")
    assert {k: getattr(mine, k) for k in SHAPES} == {k: getattr(catalog, k) for k in SHAPES}
    assert mine.param_count() == catalog.param_count()


@pytest.mark.parametrize("config, published", [
    (QWEN25_14B, 14.7e9),   # Qwen/Qwen2.5-14B model card: "Number of Parameters: 14.7B"
    (LLAMA_32_3B, 3.21e9),  # Hugging Face hub, meta-llama/Llama-3.2-3B: 3.21B params
])
def test_counts_of_the_converted_shapes_match_the_model_cards(config, published):
    assert _spec(config).param_count() == pytest.approx(published, rel=0.005)


def test_what_the_file_leaves_out_is_in_its_source():
    data = model_from_hf_config(QWEN25_14B, name="q", source="config.json")
    assert "q, k, v biases (344,064 weights)" in data["source"]   # 48 x (40 + 16) x 128
    assert "sliding window" not in data["source"]  # use_sliding_window false
    assert data["published_params"]["source"].startswith("not published")


@pytest.mark.parametrize("change, field", [
    ({"model_type": "deepseek_v3"}, "model_type"),
    ({"num_local_experts": 8}, "num_local_experts"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers"),
    ({"torch_dtype": "int4"}, "torch_dtype"),
])
def test_a_config_it_cannot_read_is_one_error_naming_the_key(change, field):
    with pytest.raises(SpecsimError) as info:
        model_from_hf_config(dict(LLAMA_31_8B, **change), name="m", source="config.json")
    assert info.value.field == field and info.value.fix


def test_the_printed_file_is_a_target_a_run_takes(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "Qwen2.5-14B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN25_14B))
    assert main(["models", "from-hf", str(folder / "config.json")]) == 0
    (tmp_path / "q.yaml").write_text(capsys.readouterr().out)
    assert load_model(str(tmp_path / "q.yaml")).name == "qwen2.5-14b"
    assert yaml.safe_load((tmp_path / "q.yaml").read_text())["num_layers"] == 48
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--no-progress", "--format", "csv", "--compare", "none", "--set",
                 "target=q.yaml", "--set", "draft=null", "--set", "hardware=h100-sxm",
                 "--set", "workload.max_requests=5"]) == 0
    assert main(["models", "from-hf", str(tmp_path / "q.yaml")]) == 2
    assert "not a JSON file" in capsys.readouterr().err


def test_a_config_json_given_as_a_model_says_how_to_make_the_model_file():
    with pytest.raises(SpecsimError, match="is a JSON file; a model file is YAML") as info:
        load_model("Qwen2.5-14B/config.json")
    assert info.value.fix.endswith("specsim models from-hf config.json --out my-model.yaml")


def test_out_writes_the_file_and_never_a_foreign_one(tmp_path, capsys):
    """--out: the file written whole (a run takes it), replaced only where specsim wrote it;
    a refused config leaves an existing file as it was (the shell's `>` emptied it)."""
    folder = tmp_path / "Qwen2.5-14B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN25_14B))
    out = tmp_path / "q.yaml"
    assert main(["models", "from-hf", str(folder / "config.json"), "--out", str(out)]) == 0
    assert load_model(str(out)).name == "qwen2.5-14b" and capsys.readouterr().out == ""
    assert main(["models", "from-hf", str(folder / "config.json"), "--out", str(out)]) == 0
    mine = tmp_path / "mine.yaml"
    mine.write_text("my notes\n")
    assert main(["models", "from-hf", str(folder / "config.json"), "--out", str(mine)]) == 2
    assert "--out" in capsys.readouterr().err and mine.read_text() == "my notes\n"
    (folder / "bad.json").write_text(json.dumps(dict(QWEN25_14B, model_type="mixtral")))
    assert main(["models", "from-hf", str(folder / "bad.json"), "--out", str(out)]) == 2
    assert load_model(str(out)).name == "qwen2.5-14b"  # the earlier file, whole
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".specsim")] == []
    assert main(["models", "from-hf", str(folder / "config.json"), "--out", str(mine),
                 "--overwrite"]) == 0 and load_model(str(mine)).name == "qwen2.5-14b"


@pytest.mark.parametrize("change, key", [
    ({"intermediate_size": 10**12}, "intermediate_size"),
    ({"num_key_value_heads": 7}, "num_key_value_heads"),
    ({"max_position_embeddings": 10**12}, "max_position_embeddings"),
])
def test_a_value_the_model_refuses_names_the_configs_key_and_a_fix(change, key):
    """The model file's checks named its own keys (ffn_size, num_kv_heads, max_context),
    which the user's config.json does not have, and gave no fix."""
    with pytest.raises(SpecsimError) as info:
        model_from_hf_config(dict(LLAMA_31_8B, **change), name="m", source="L/config.json")
    assert info.value.field == key and key in info.value.fix


def test_the_source_names_the_configs_folder_and_an_assumed_dtype():
    config = {k: v for k, v in LLAMA_31_8B.items() if k != "torch_dtype"}
    text = model_from_hf_config(config, name="m", source="Llama-3.1-8B/config.json")["source"]
    assert "Llama-3.1-8B/config.json" in text and "config.json config.json" not in text
    assert "no torch_dtype given: bfloat16 assumed" in text
