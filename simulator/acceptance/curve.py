"""A measured acceptance-length curve AL(gamma) turned into per-position acceptance.

The curves in ``../shared/traces/acceptance/*.yaml`` (InferenceX, SPEED-Bench on vLLM) map
``num_speculative_tokens`` to the mean acceptance length AL (bonus included) per model and
per thinking mode::

    deepseek-v4-pro:
      thinking_on: {1: 1.79, 2: 2.27, ...}

A positional model has AL(g) = 1 + sum_{k<=g} S_k with S_k = P(first k drafts accepted), so
S_k = AL(k) - AL(k-1) (AL(0) = 1) and the conditional rate at k is S_k / S_{k-1}.  That is
only consistent when the increments are non-increasing and in [0, 1]; measured curves wobble
(for example AL falls from gamma 7 to 8), so S is the least-squares projection of the
increments onto that set: pool-adjacent-violators, then clip to [0, 1] (clipping the
isotonic fit is the bounded projection).  ``max_fit_error`` says how far the fitted AL is
from the measured one.  Past the last measured gamma the last conditional rate repeats.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.fields import model_config
from simulator.acceptance.positional import PositionalAcceptance
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_number, as_str, load_yaml_file

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def pool_adjacent_violators(values: np.ndarray) -> np.ndarray:
    """Least-squares non-increasing fit to ``values`` (equal weights)."""
    blocks: list[list[float]] = []                      # [mean, count]
    for v in np.asarray(values, dtype=float):
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return np.concatenate([np.full(int(n), m) for m, n in blocks])


def survival_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """S_k = P(first k accepted), k = 1..G, fitted to AL(1..G) as described above."""
    increments = np.diff(np.concatenate([[1.0], lengths]))
    return np.clip(pool_adjacent_violators(increments), 0.0, 1.0)


def conditional_rates(survival: np.ndarray) -> np.ndarray:
    """r_k = S_k / S_{k-1} (0 once S reaches 0)."""
    prev = np.concatenate([[1.0], survival[:-1]])
    return np.where(prev > 0, survival / np.where(prev > 0, prev, 1.0), 0.0)


def _parse_lengths(value: Any, *, source: str, field: str) -> np.ndarray:
    if not isinstance(value, Mapping) or not value:
        raise SpecsimError("expected a mapping of num_speculative_tokens to acceptance length",
                           source=source, field=field, fix="write e.g. {1: 1.79, 2: 2.27}")
    points: dict[int, float] = {}
    for key, al in value.items():
        if isinstance(key, str) and key.strip().isdigit():
            key = int(key)
        gamma = as_number(key, source=source, field=f"{field} key", integer=True, minimum=1)
        points[int(gamma)] = float(as_number(al, source=source, field=f"{field}[{gamma}]",
                                             minimum=1.0, maximum=gamma + 1.0))
    top = max(points)
    missing = [g for g in range(1, top + 1) if g not in points]
    if missing:
        raise SpecsimError(f"acceptance lengths missing for gamma {missing}", source=source,
                           field=field, fix="give every gamma from 1 up to the largest")
    return np.array([points[g] for g in range(1, top + 1)])


def _resolve(path_text: str, source: str) -> Path:
    path = Path(path_text)
    if path.is_absolute() or path.exists():
        return path
    alt = PROJECT_ROOT / path
    return alt if alt.exists() else path


def _leaf_paths(node: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, Mapping) and node and \
            all(not isinstance(v, Mapping) for v in node.values()):
        return [prefix]
    if isinstance(node, Mapping):
        out = []
        for k, v in node.items():
            out += _leaf_paths(v, prefix + (str(k),))
        return out
    return []


def load_curve(path: str, key: Any = None, *, source: str = "acceptance") -> np.ndarray:
    """Read AL(1..G) from an InferenceX-style file; ``key`` like 'model/thinking_on'."""
    file = _resolve(path, source)
    data = load_yaml_file(file)
    leaves = _leaf_paths(data)
    if key is None:
        if len(leaves) != 1:
            raise SpecsimError("the file holds several curves; choose one", source=source,
                               field="key", fix="key: one of " +
                               ", ".join("/".join(p) for p in leaves))
        parts = leaves[0]
    elif isinstance(key, str):
        parts = tuple(as_str(key, source=source, field="key").split("/"))
    elif isinstance(key, (list, tuple)) and key:
        parts = tuple(as_str(k, source=source, field="key") for k in key)
    else:
        raise SpecsimError(f"expected 'model/mode' or a list of keys, got {key!r}",
                           source=source, field="key")
    node = data
    for depth, part in enumerate(parts):
        if not isinstance(node, Mapping) or part not in {str(k) for k in node}:
            raise SpecsimError(f"{'/'.join(parts[:depth + 1])!r} not found in {file}",
                               source=source, field="key", fix="key: one of " +
                               ", ".join("/".join(p) for p in leaves))
        node = {str(k): v for k, v in node.items()}[part]
    return _parse_lengths(node, source=str(file), field="/".join(parts))


@dataclass(frozen=True)
class CurveAcceptance(PositionalAcceptance):
    """Positional acceptance fitted to measured AL(gamma); ``lengths[g-1]`` is AL(g)."""

    lengths: tuple[float, ...] = ()
    name: ClassVar[str] = "curve"

    @classmethod
    def from_lengths(cls, lengths) -> "CurveAcceptance":
        """Fit the conditional rates to the measured curve AL(1), AL(2), ..."""
        al = np.asarray(lengths, dtype=float)
        if al.ndim != 1 or al.size == 0 or np.any(~np.isfinite(al)) or np.any(al < 1) \
                or np.any(al > np.arange(2, al.size + 2)):
            raise SpecsimError("AL(g) must lie in [1, g + 1] for g = 1..G", field="lengths")
        rates = conditional_rates(survival_from_lengths(al))
        return cls(rates=tuple(rates), lengths=tuple(float(x) for x in al))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "CurveAcceptance":
        cfg = model_config(cfg, allowed=("lengths", "path", "key"), source=source)
        if ("lengths" in cfg) == ("path" in cfg):
            raise SpecsimError("give exactly one of 'lengths' or 'path'", source=source,
                               field="lengths", fix="lengths: {1: 1.79, 2: 2.27} or "
                               "path: ../shared/traces/acceptance/dsv4_mtp.yaml")
        if "key" in cfg and "path" not in cfg:
            raise SpecsimError("'key' needs 'path'", source=source, field="key")
        if "lengths" in cfg:
            al = _parse_lengths(cfg["lengths"], source=source, field="lengths")
        else:
            al = load_curve(as_str(cfg["path"], source=source, field="path"), cfg.get("key"),
                            source=source)
        return cls.from_lengths(al)

    @property
    def fitted_lengths(self) -> np.ndarray:
        """AL(g) implied by the fitted rates, g = 1..G."""
        return 1.0 + np.cumsum(self.position_rates(len(self.lengths)))

    @property
    def max_fit_error(self) -> float:
        """Largest |fitted AL - measured AL| over the measured gammas."""
        return float(np.max(np.abs(self.fitted_lengths - np.asarray(self.lengths))))
