"""A catalog: a folder of YAML files looked up by name (the file's stem), plus a user's folder.

Hardware profiles (hardware/profiles/) and model specs (simulator/models/) are catalogs: a
name is a file stem, a user's folder (``--hardware-dir``, ``model_dir``) adds files and
overrides a built-in one of the same name, and a name ending in .yaml is a path.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import clip, short

T = TypeVar("T")
# a .json path where a YAML file is expected: the fix, by kind
JSON_FIXES = {"model": "write the model file of a Hugging Face config.json: specsim models "
                       "from-hf config.json --out my-model.yaml"}


@dataclass(frozen=True)
class Catalog:
    """The built-in files of one kind, and the flag that names a user's folder of them."""

    kind: str                  # the noun and field of an unknown name: "hardware", "model"
    folder: Path
    dir_flag: str              # e.g. "--hardware-dir"
    dir_fix: str | None = None

    def paths(self, user_dir: str | Path | None = None) -> dict[str, Path]:
        """Name -> file; a user's folder overrides a built-in file of the same name."""
        dirs = [self.folder]
        if user_dir is not None:
            extra = Path(user_dir)
            if not extra.is_dir():
                raise SpecsimError("not a directory", field=self.dir_flag,
                                   source=clip(extra, 200), fix=self.dir_fix)
            dirs.append(extra)
        paths: dict[str, Path] = {}
        for d in dirs:
            for p in sorted(d.glob("*.yaml")):
                paths[p.stem] = p
        return paths

    def names(self, user_dir: str | Path | None = None) -> list[str]:
        """The names on offer, built-in and the user's."""
        return sorted(self.paths(user_dir))

    def load(self, name: str, user_dir: str | Path | None,
             load_file: Callable[[str | Path], T]) -> T:
        """``load_file`` of the file called ``name`` (or of the path ``name``, if a .yaml);
        the loaded object's ``name`` must be its file's stem."""
        if name.endswith((".yaml", ".yml")):
            return load_file(name)
        if name.endswith(".json"):
            raise SpecsimError(f"{short(name)} is a JSON file; a {self.kind} file is YAML",
                               field=self.kind, fix=JSON_FIXES.get(self.kind) or
                               f"write it as YAML (specsim {self.kind} show NAME prints "
                               "one's keys)")
        paths = self.paths(user_dir)
        if name not in paths:
            hint = JSON_FIXES.get(self.kind) if "/" in name else None  # a Hugging Face id
            raise SpecsimError(f"unknown {self.kind} {short(name)}", field=self.kind,
                               fix=(f"{hint}; or " if hint else "") + "valid names are: "
                               + ", ".join(sorted(paths)))
        item = load_file(paths[name])
        if item.name != name:
            raise SpecsimError(f"file name {short(name)} and name {short(item.name)} differ",
                               source=str(paths[name]), field="name", fix=f"set name: {name}")
        return item
