"""Sweeps: a grid (or list) of points, analytic or simulated, streamed to CSV/Parquet, resumable.

A sweep file::

    mode: simulated                 # or analytic (closed forms + cost model, no event loop)
    scenario: default               # simulated only: built-in, a path, or an inline mapping
    fixed: {workload.max_requests: 200}
    grid: {gamma: [1, 2, 4], workload.rate_per_s: [1, 2, 4]}
    points: [{policy: none}, {policy: chain}]      # optional; crossed with the grid

Simulated points are scenario overrides (dotted paths or the short names in ``SIM_ALIASES``)
applied with ``apply_overrides`` and validated by ``scenario_from_dict``, all before anything
runs.  Analytic points take the fields of ``simulator.planning.analytic.FIELDS``.  Every point has a
key, a stable hash of what it evaluates (the merged analytic fields, or the final scenario
mapping), so a rerun on the same output skips the points already there.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import (
    as_str,
    check_keys,
    clip,
    load_yaml_file,
    require_mapping,
    short,
)
from simulator.planning import analytic
from simulator.planning.executors import Failure, check_executor_args, make_executor, run_items
from simulator.planning.result_sink import ResultSink  # noqa: F401  (re-exported: sweep.ResultSink)

MODES = ("analytic", "simulated")
TOP_KEYS = ("name", "mode", "scenario", "fixed", "grid", "points")
SIM_ALIASES = {"gamma": "policy.num_speculative_tokens",
               "num_speculative_tokens": "policy.num_speculative_tokens",
               "rate_per_s": "workload.rate_per_s", "rate": "workload.rate_per_s",
               "tensor_parallel": "parallelism.tensor_parallel", "alpha": "acceptance.alpha",
               "max_num_seqs": "batching.max_num_seqs"}
SIM_SWEEPABLE = ("seed", "hardware", "target", "draft", "parallelism", "policy", "acceptance",
                 "batching", "workload", "slo", "replicas", "router", "overheads")
NOT_SWEEPABLE = {"name": "it labels the scenario, not a configuration",
                 "hardware_dir": "it is a search path; set it under fixed",
                 "uncertainty": "it declares how uncertain every point's inputs are, the "
                                "same for all to compare like for like; set it under fixed"}
ANALYTIC_ONLY = ("batch", "context", "tree_width", "c", "c_target_over_draft")

# Sweep sizes (docs/limits.md), checked on the product of the axis lengths before any
# point is built.  Above CONFIRM_POINTS a sweep needs --allow-large (allow_large=True);
# MAX_POINTS is refused even then (about 1 KB of memory per point, and an analytic point
# costs about 150 us, a simulated one seconds).
CONFIRM_POINTS = {"analytic": 100_000, "simulated": 1_000}
MAX_POINTS = {"analytic": 2_000_000, "simulated": 100_000}


def check_sweep_size(count: int, *, mode: str, allow_large: bool = False,
                     source: str = "sweep") -> None:
    """Refuse a sweep of ``count`` points above the limits of ``mode`` (before expanding it)."""
    hard, confirm = MAX_POINTS[mode], CONFIRM_POINTS[mode]
    if count > hard:
        raise SpecsimError(f"the grid has {count:,} {mode} points; the limit is {hard:,} "
                           f"{mode} points, even with --allow-large", source=source,
                           field="grid", fix="use coarser axes or split it into several "
                                             "sweeps")
    if count > confirm and not allow_large:
        raise SpecsimError(f"the grid has {count:,} {mode} points, above {confirm:,}",
                           source=source, field="grid",
                           fix="confirm with --allow-large, or use coarser axes")


def _not_sweepable(name: str, why: str, fix: str, source: str) -> SpecsimError:
    return SpecsimError(f"{short(name)} is not sweepable: {why}", source=source,
                        field=clip(name), fix=fix)


def canonical_field(mode: str, name: str, *, source: str = "sweep", fixed: bool = False) -> str:
    """The field a sweep name sets: an analytic field, or a scenario path in simulated mode."""
    if not isinstance(name, str) or not name:
        raise SpecsimError(f"field names are non-empty strings, got {short(name)}",
                           source=source)
    top = name.split(".")[0]
    if top in NOT_SWEEPABLE and not fixed:
        raise _not_sweepable(name, NOT_SWEEPABLE[top], "set it in the base scenario or under "
                             "fixed", source)
    if mode == "analytic":
        alias = {a: f for f, p in analytic.FIELDS.items() for a in p.aliases}
        canon = alias.get(name, name)
        if canon in analytic.FIELDS and (fixed or canon != "hardware_dir"):
            return canon
        if name in SIM_ALIASES or top in SIM_SWEEPABLE:
            raise _not_sweepable(name, "analytic mode has no event loop, trace or scheduler",
                                 "use mode: simulated, or one of: "
                                 + ", ".join(analytic.FIELDS), source)
        raise SpecsimError(f"unknown field {short(name)}", source=source, field=clip(name),
                           fix="analytic fields are: " + ", ".join(analytic.FIELDS))
    if name in SIM_ALIASES:
        return SIM_ALIASES[name]
    if name in ANALYTIC_ONLY:
        raise _not_sweepable(name, "in simulated mode batches and contexts come from the trace "
                             "and the scheduler", "sweep batching.max_num_seqs or workload.*, "
                             "or use mode: analytic", source)
    if top in SIM_SWEEPABLE or (fixed and top in NOT_SWEEPABLE):
        return name
    raise SpecsimError(f"unknown field {short(name)}", source=source, field=clip(name),
                       fix="sweep a scenario path under one of: " + ", ".join(SIM_SWEEPABLE)
                       + ", or a short name: " + ", ".join(SIM_ALIASES))


def expand_grid(grid: Mapping[str, Sequence] | None, points: Sequence[Mapping] | None = None,
                *, source: str = "sweep", mode: str = "analytic",
                allow_large: bool = False) -> list[dict]:
    """Cartesian product of ``grid`` (last field fastest), crossed with each of ``points``.

    The number of points is checked (``check_sweep_size``) before the product is built.
    """
    grid = dict(require_mapping(grid or {}, source=source, field="grid"))
    for name, values in grid.items():
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
            raise SpecsimError(f"expected a list of values, got {short(values)}",
                               source=source, field=f"grid.{clip(name)}",
                               fix=f"write {clip(name)}: [1, 2, 4]")
        if not values:
            raise SpecsimError("has no values: the grid is empty", source=source,
                               field=f"grid.{name}", fix="give at least one value")
    if points is not None and (not isinstance(points, Sequence) or isinstance(points, str)
                               or not points):
        raise SpecsimError("expected a non-empty list of points", source=source, field="points")
    check_sweep_size(math.prod(len(v) for v in grid.values()) * len(points or [{}]),
                     mode=mode, allow_large=allow_large, source=source)
    base = [dict(require_mapping(p, source=source, field=f"points[{i}]"))
            for i, p in enumerate(points or [{}])]
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    out = []
    for p in base:
        for combo in combos:
            clash = set(p) & set(combo)
            if clash:
                raise SpecsimError(f"{sorted(clash)[0]!r} is in both points and grid",
                                   source=source, field="points", fix="set it in one place")
            out.append({**p, **combo})
    if not out or out == [{}]:
        raise SpecsimError("the grid is empty", source=source, field="grid",
                           fix="give grid: {gamma: [1, 2, 4]} or a points: list")
    return out


def point_key(payload: Mapping[str, Any]) -> str:
    """A stable 16-hex-digit hash of what a point evaluates."""
    text = json.dumps(payload, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cell(value: Any) -> Any:
    """A DataFrame cell for a parameter: scalars as they are, a policy as its label."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping) and "name" in value:
        rest = {k: v for k, v in value.items() if k != "name"}
        return str(value["name"]) + (":" + ",".join(f"{k}={v}" for k, v in sorted(rest.items()))
                                     if rest else "")
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class SweepSpec:
    """Validated points: their display columns, what each evaluates, and its key."""

    mode: str
    columns: tuple[dict, ...]      # per point: field as written -> cell value
    payloads: tuple[dict, ...]     # per point: merged analytic fields or final scenario mapping
    base_dir: str = "."
    name: str = "sweep"

    def __post_init__(self) -> None:
        if not self.payloads:
            raise SpecsimError("the grid is empty", field="grid", fix="give at least one point")

    def __len__(self) -> int:
        return len(self.payloads)

    def keys(self) -> list[str]:
        return [point_key({"mode": self.mode, "point": p}) for p in self.payloads]

    def task(self, i: int) -> tuple:
        return (self.mode, self.payloads[i], self.base_dir)

    @classmethod
    def analytic(cls, points: Sequence[Mapping], *, fixed: Mapping | None = None,
                 source: str = "sweep", name: str = "sweep") -> "SweepSpec":
        """An analytic sweep: each point (plus ``fixed``) is checked by analytic.check_point."""
        fixed = {canonical_field("analytic", k, source=source, fixed=True): v
                 for k, v in dict(fixed or {}).items()}
        columns, payloads = [], []
        for i, point in enumerate(points):
            merged = dict(fixed)
            for k, v in point.items():
                merged[canonical_field("analytic", k, source=source)] = v
            analytic.check_point(merged, source=f"{source}: point {i}", names=True)
            columns.append({k: _cell(v) for k, v in {**fixed, **point}.items()})
            payloads.append(merged)
        return cls("analytic", tuple(columns), tuple(payloads), ".", name)

    @classmethod
    def simulated(cls, points: Sequence[Mapping], *, scenario: Any = None,
                  fixed: Mapping | None = None, source: str = "sweep",
                  base_dir: str | Path = ".", name: str = "sweep") -> "SweepSpec":
        """A simulated sweep over overrides of ``scenario`` (None: the built-in one)."""
        from simulator.scenario import apply_overrides, scenario_from_dict
        base_raw, base_dir = _base_scenario(scenario, Path(base_dir), source)

        def override(raw: dict, items: Mapping, is_fixed: bool) -> dict:
            sets = [f"{canonical_field('simulated', k, source=source, fixed=is_fixed)}="
                    f"{json.dumps(v)}" for k, v in items.items()]
            return apply_overrides(raw, sets)

        from simulator.acceptance.provenance import without_borrowed_acceptance
        file_raw, base_raw = base_raw, override(base_raw, dict(fixed or {}), True)
        columns, payloads, workloads = [], [], {}
        for i, point in enumerate(points):
            where = f"{source}: point {i} " \
                f"({clip(', '.join(f'{k}={v}' for k, v in point.items()), 120)})"
            try:
                raw = without_borrowed_acceptance(file_raw, override(base_raw, point, False))
                sc = scenario_from_dict(raw, source=where, base_dir=base_dir)
                analytic.check_names(sc.hardware if sc.hardware_inline is None else None,
                                      sc.hardware_dir, sc.target, sc.draft)
            except SpecsimError as exc:
                raise exc.relocated(source=where) from None
            workloads.setdefault(point_key(dict(sc.workload)), (dict(sc.workload), where))
            columns.append({k: _cell(v) for k, v in {**dict(fixed or {}), **point}.items()})
            payloads.append(raw)
        from workloads.config import workload_from_config
        for cfg, where in workloads.values():  # a bad workload fails here, not in every worker
            workload_from_config(cfg, rng=np.random.default_rng(0), base_dir=base_dir,
                                 source=where)
        return cls("simulated", tuple(columns), tuple(payloads), str(base_dir), name)


def _base_scenario(scenario: Any, base_dir: Path, source: str) -> tuple[dict, Path]:
    from simulator.scenario import DEFAULT_SCENARIO, Scenario
    if isinstance(scenario, Scenario):
        return dict(scenario.raw), Path(scenario.base_dir)
    if scenario is None or scenario == "default":
        path = DEFAULT_SCENARIO
    elif isinstance(scenario, (str, Path)):
        path = Path(scenario) if Path(scenario).is_absolute() else base_dir / scenario
    else:
        return dict(require_mapping(scenario, source=source, field="scenario")), base_dir
    return dict(require_mapping(load_yaml_file(path), source=str(path))), path.resolve().parent


def sweep_from_dict(data: Any, *, source: str, base_dir: str | Path = ".",
                    allow_large: bool = False) -> SweepSpec:
    """Validate a parsed sweep mapping (see the module docstring).

    ``allow_large`` confirms a grid above ``CONFIRM_POINTS`` (the CLI's --allow-large).
    """
    data = require_mapping(data, source=source)
    check_keys(data, allowed=TOP_KEYS, required=("mode",), source=source)
    mode = as_str(data["mode"], source=source, field="mode", choices=MODES)
    name = as_str(data.get("name", "sweep"), source=source, field="name")
    fixed = require_mapping(data.get("fixed") or {}, source=source, field="fixed")
    points = expand_grid(data.get("grid"), data.get("points"), source=source, mode=mode,
                         allow_large=allow_large)
    if mode == "analytic":
        if "scenario" in data:
            raise SpecsimError("only simulated sweeps take a scenario", source=source,
                               field="scenario", fix="remove it, or use mode: simulated")
        return SweepSpec.analytic(points, fixed=fixed, source=source, name=name)
    return SweepSpec.simulated(points, scenario=data.get("scenario"), fixed=fixed,
                               source=source, base_dir=base_dir, name=name)


def load_sweep(path: str | Path, *, allow_large: bool = False) -> SweepSpec:
    """Read and validate a sweep YAML file (``allow_large``: see ``sweep_from_dict``)."""
    path = Path(path)
    return sweep_from_dict(load_yaml_file(path), source=str(path),
                           base_dir=path.resolve().parent, allow_large=allow_large)


def evaluate(task: tuple) -> dict[str, Any]:
    """Evaluate one point (runs in a worker): analytic results or a simulation summary."""
    from simulator.acceptance.provenance import acceptance_columns, point_provenance
    mode, payload, base_dir = task
    if mode == "analytic":
        out = analytic.analytic_point(payload)
        return {**out, **acceptance_columns(point_provenance(analytic.check_point(payload)))}
    from simulator.scenario import scenario_from_dict
    from simulator.simulate import simulate
    res = simulate(scenario_from_dict(payload, source="sweep point", base_dir=base_dir))
    summary = res.summary()
    summary["policy_label"] = summary.pop("policy")
    return {**summary, "acceptance_source": res.info["acceptance_source"],
            "acceptance_warning": res.info["acceptance_warning"]}


def _assemble(df: pd.DataFrame, spec: SweepSpec, keys: list[str]) -> pd.DataFrame:
    """One row per point of ``spec``, in point order; columns: point, key, fields, results,
    error."""
    df = df.drop_duplicates("key", keep="last").set_index("key")
    df = df.drop(columns=[c for c in ("point",) if c in df]).reindex(keys)
    df.insert(0, "point", np.arange(len(keys)))
    df = df.reset_index().rename(columns={"index": "key"})
    fields = list(dict.fromkeys(k for cols in spec.columns for k in cols))
    rest = [c for c in df.columns if c not in ("point", "key", "error", *fields)]
    if "error" not in df:
        df["error"] = None
    return df[["point", "key", *fields, *rest, "error"]]


# below this many analytic points (about 150 us each) starting a process pool costs more
# than it saves
AUTO_SERIAL_POINTS = 20_000


def _open(spec: SweepSpec, executor: Any, *, workers, address, out,
          restart: bool) -> tuple[Any, ResultSink | None]:
    """Check every executor argument, then open the results file (``restart`` empties it).
    Before anything is removed, an executor named for a restart is started, so that an
    unreachable cluster costs no results: (that executor or None, the sink or None)."""
    early = None
    if isinstance(executor, str):  # every argument is checked before --restart removes
        check_executor_args(executor, workers=workers, address=address)
        if restart and out is not None and len(spec):  # and a cluster must be reachable
            early = make_executor(executor, workers=workers, address=address)
    try:
        sink = ResultSink(out, restart=restart) if out is not None else None
    except BaseException:
        if early is not None:
            early.close()
        raise
    return early, sink


def run_sweep(spec: SweepSpec, *, executor: Any = "auto", workers: int | None = None,
              address: str | None = None, out: str | Path | None = None,
              progress: Callable[[int, int], None] | None = None,
              chunk_size: int | None = None, restart: bool = False) -> pd.DataFrame:
    """Evaluate every point not already in ``out``; return one tidy row per point.

    ``executor`` is a name (``local``, ``serial``, ``ray``; ``auto``: the local pool, or one
    process for an analytic sweep under AUTO_SERIAL_POINTS points) or an executor object.
    ``progress(done, total)`` is called as points settle (the points still to run).
    """
    if executor == "auto":
        executor = "serial" if spec.mode == "analytic" and len(spec) < AUTO_SERIAL_POINTS \
            else "local"
    early, sink = _open(spec, executor, workers=workers, address=address, out=out,
                        restart=restart)
    keys = spec.keys()
    done = sink.done_keys() if sink is not None else set()
    todo = list({k: i for i, k in reversed(list(enumerate(keys))) if k not in done}.values())
    todo.sort()
    rows: list[dict] = []

    def settle(j: int, value: Any) -> None:
        i = todo[j]
        row = {"point": i, "key": keys[i], **spec.columns[i]}
        if isinstance(value, Failure):
            row["error"] = value.error
        else:
            row.update(value)
            row["error"] = None
        rows.append(row)
        if sink is not None:
            sink.add(row)
        if progress is not None:
            progress(len(rows), len(todo))

    own = isinstance(executor, str) and (bool(todo) or early is not None)
    if early is not None:
        ex = early
    else:  # nothing to do: start no pool or Ray
        ex = make_executor(executor, workers=workers, address=address) if own else executor
    try:
        if todo:
            run_items(evaluate, [spec.task(i) for i in todo], ex, chunk_size=chunk_size,
                      on_result=settle)
    finally:
        if own:
            ex.close()
        if sink is not None:
            sink.flush()
    df = sink.read() if sink is not None else pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame({"key": pd.Series(dtype=str)})
    return _assemble(df, spec, keys)
