"""The catalog's Hugging Face id table (simulator/models/ids/huggingface.yaml): every id in it
resolves to its catalog model, every catalog model has its own id first (the one its file's
shapes were read from), and a listed -Instruct / chat checkpoint prices as its base model
(issue 37: the 70B EAGLE-3 head's id, scraped from a prose source with its comma, was
refused; '-Instruct' ids of catalogued shapes needed edits)."""
import pytest

from simulator.inputs.yaml_io import load_yaml_file
from simulator.models.spec import list_models, load_model
from simulator.vllm_config import HF_IDS, resolve_model

TABLE = load_yaml_file(HF_IDS)
PAIRS = [(name, hf) for name, ids in TABLE.items() for hf in ids]


def test_every_catalog_model_is_in_the_table_and_nothing_else():
    assert sorted(TABLE) == sorted(list_models())
    ids = [hf.lower() for _, hf in PAIRS]
    assert len(ids) == len(set(ids))  # an id names one model


@pytest.mark.parametrize("name, hf", PAIRS, ids=[hf for _, hf in PAIRS])
def test_every_listed_id_resolves_to_its_model(name, hf):
    assert resolve_model(hf, method=None, base_dir=".", source="t", field="model")[0] == name
    assert resolve_model(hf.upper(), method=None, base_dir=".", source="t",
                         field="model")[0] == name


@pytest.mark.parametrize("name", sorted(n for n in TABLE if TABLE[n]))
def test_the_first_id_is_the_one_the_shapes_come_from(name):
    assert (load_model(name).source or "").startswith(TABLE[name][0]), name


def test_the_70b_eagle3_head_and_an_instruct_target_resolve():
    head = resolve_model("yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", method="eagle3",
                         base_dir=".", source="t", field="model")[0]
    target = resolve_model("meta-llama/Llama-3.3-70B-Instruct", method=None, base_dir=".",
                           source="t", field="model")[0]
    assert (head, target) == ("eagle3-llama-3.1-70b-instruct", "llama-3.1-70b")
