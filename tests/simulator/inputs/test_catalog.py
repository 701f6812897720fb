"""Catalog: a folder of YAML files named by their stems, plus a user's folder that adds names
and overrides built-in ones; a name ending in .yaml is a path; an unknown name lists the
valid ones; a loaded file must carry its own stem as its name."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from hardware.profile import PROFILES
from simulator.inputs.catalog import Catalog
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import load_yaml_file
from simulator.models.spec import MODEL_DIR, MODELS, load_model_file


def _write(folder: Path, stem: str, name: str | None = None, suffix: str = ".yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (stem + suffix)
    path.write_text(f"name: {stem if name is None else name}\norigin: {folder.name}\n",
                    encoding="utf-8")
    return path


class Loader:
    """A load_file that reads the YAML and records what it was given."""

    def __init__(self) -> None:
        self.calls: list = []

    def __call__(self, path):
        self.calls.append(path)
        return SimpleNamespace(**load_yaml_file(path))


@pytest.fixture
def shipped(tmp_path):
    """A catalog of three built-in files (and a non-YAML file beside them)."""
    folder = tmp_path / "builtin"
    for stem in ("b-model", "a-model", "c.1-model"):
        _write(folder, stem)
    (folder / "notes.txt").write_text("not a catalog entry\n")
    return Catalog("widget", folder, "--widget-dir", dir_fix="name a folder of widget files")


def test_names_are_the_yaml_stems_sorted(shipped):
    assert shipped.names() == ["a-model", "b-model", "c.1-model"]
    assert shipped.paths() == {s: shipped.folder / f"{s}.yaml"
                               for s in ("a-model", "b-model", "c.1-model")}


def test_a_user_folder_adds_names(shipped, tmp_path):
    _write(tmp_path / "user", "mine")
    assert shipped.names(tmp_path / "user") == ["a-model", "b-model", "c.1-model", "mine"]
    assert shipped.names(str(tmp_path / "user")) == shipped.names(tmp_path / "user")
    assert shipped.names() == ["a-model", "b-model", "c.1-model"]   # only when given


def test_a_user_file_overrides_the_built_in_one_of_the_same_name(shipped, tmp_path):
    user = _write(tmp_path / "user", "b-model")
    assert shipped.names(tmp_path / "user") == ["a-model", "b-model", "c.1-model"]
    assert shipped.paths(tmp_path / "user")["b-model"] == user
    load = Loader()
    assert shipped.load("b-model", tmp_path / "user", load).origin == "user"
    assert load.calls == [user]
    assert shipped.load("b-model", None, load).origin == "builtin"
    assert shipped.load("a-model", tmp_path / "user", load).origin == "builtin"


def test_an_empty_user_folder_changes_nothing(shipped, tmp_path):
    (tmp_path / "empty").mkdir()
    assert shipped.paths(tmp_path / "empty") == shipped.paths()


@pytest.mark.parametrize("make", ["missing", "file"])
def test_a_user_folder_that_is_not_a_directory_is_refused(shipped, tmp_path, make):
    path = tmp_path / "nowhere"
    if make == "file":
        path.write_text("x")
    for call in (lambda: shipped.names(path), lambda: shipped.load("a-model", path, Loader())):
        with pytest.raises(SpecsimError) as err:
            call()
        assert (err.value.message, err.value.field, err.value.fix) == \
            ("not a directory", "--widget-dir", "name a folder of widget files")
        assert err.value.source == str(path)
        assert str(err.value) == (f"{path}: --widget-dir: not a directory "
                                  "(fix: name a folder of widget files)")


def test_an_unknown_name_lists_the_valid_names_the_users_too(shipped, tmp_path):
    _write(tmp_path / "user", "mine")
    with pytest.raises(SpecsimError) as err:
        shipped.load("d-model", tmp_path / "user", Loader())
    assert err.value.message == "unknown widget 'd-model'"
    assert err.value.field == "widget"
    assert err.value.fix == "valid names are: a-model, b-model, c.1-model, mine"
    assert str(err.value) == ("widget: unknown widget 'd-model' "
                              "(fix: valid names are: a-model, b-model, c.1-model, mine)")
    with pytest.raises(SpecsimError, match="valid names are: a-model, b-model, c.1-model\\)$"):
        shipped.load("mine", None, Loader())            # the user's file is not there without it


def test_a_name_is_a_stem_not_a_file_name(shipped):
    with pytest.raises(SpecsimError, match="unknown widget 'a-model.txt'"):
        shipped.load("a-model.txt", None, Loader())


def test_a_loaded_file_must_carry_its_stem_as_its_name(shipped, tmp_path):
    path = _write(tmp_path / "user", "fast", name="slow")
    with pytest.raises(SpecsimError) as err:
        shipped.load("fast", tmp_path / "user", Loader())
    assert (err.value.message, err.value.source, err.value.field, err.value.fix) == \
        ("file name 'fast' and name 'slow' differ", str(path), "name", "set name: fast")


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_a_name_ending_in_yaml_is_a_path_loaded_as_given(shipped, tmp_path, suffix):
    path = _write(tmp_path / "elsewhere", "anything", name="other-name", suffix=suffix)
    load = Loader()
    item = shipped.load(str(path), None, load)
    assert load.calls == [str(path)]                  # not looked up in the folders
    assert item.name == "other-name"                  # and no stem check for a path
    # a path relative to nowhere in particular is handed over as written too
    load = Loader()
    with pytest.raises(SpecsimError, match="file not found"):
        shipped.load("a-model" + suffix, None, load)
    assert load.calls == ["a-model" + suffix]


# ---------------------------------------------------------------- the shipped catalogs
def test_the_shipped_model_catalog_is_its_folder_of_yaml_files():
    names = MODELS.names()
    assert names == sorted(p.stem for p in MODEL_DIR.glob("*.yaml"))
    assert {"llama-68m", "opt-125m", "llama-3.1-8b"} <= set(names)
    assert "spec" not in names and "__init__" not in names     # the .py files beside them
    assert (MODELS.kind, MODELS.dir_flag, PROFILES.kind, PROFILES.dir_flag) == \
        ("model", "model_dir", "hardware", "--hardware-dir")
    assert {"a100-40gb", "h100-sxm"} <= set(PROFILES.names())


def test_a_user_model_shadows_the_shipped_one_and_adds_its_own(tmp_path):
    text = (MODEL_DIR / "llama-68m.yaml").read_text(encoding="utf-8")
    assert "num_layers: 2\n" in text
    user = tmp_path / "models"
    user.mkdir()
    (user / "llama-68m.yaml").write_text(text.replace("num_layers: 2\n", "num_layers: 5\n"))
    (user / "llama-68m-wide.yaml").write_text(
        text.replace("name: llama-68m\n", "name: llama-68m-wide\n"))
    assert MODELS.names(user) == sorted(MODELS.names() + ["llama-68m-wide"])
    assert MODELS.load("llama-68m", user, load_model_file).num_layers == 5
    assert MODELS.load("llama-68m", None, load_model_file).num_layers == 2
    assert MODELS.load("llama-68m-wide", user, load_model_file).num_layers == 2
    with pytest.raises(SpecsimError) as err:
        MODELS.load("llama-68", user, load_model_file)
    assert err.value.field == "model"
    assert err.value.fix == "valid names are: " + ", ".join(MODELS.names(user))
    assert "llama-68m-wide" in err.value.fix
