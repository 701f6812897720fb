"""Before a plan simulates anything: each candidate's trace against the model's context
(``preflight``, ``preflight_lines``) and the trace cut to fit as the plan's ``over_context``
says (``fit_context``).  Split from plan.py, which runs the searches."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.simulate import check_runnable, scenario_workload


class Candidates(Protocol):
    """What ``preflight`` reads of a plan (``plan.PlanSpec`` has it): the labelled scenario
    dicts and the folder their relative paths start from."""
    @property
    def candidates(self) -> Sequence[tuple[str, dict]]: ...

    @property
    def base_dir(self) -> str | Path: ...


def context_limits(scenario) -> tuple[Any, int | None]:
    """(target model, the shortest max_context of the drafts that keep a KV cache, or None)
    of a scenario: vLLM rejects a request over the target's max_context and stops
    speculating one at the draft's (simulator/cost/drafting.py ``fits_draft_context``)."""
    from simulator.cost.drafting import draft_max_context
    from simulator.deployment import resolve_deployment
    from simulator.models.spec import load_model
    try:
        res = resolve_deployment(scenario)
    except SpecsimError:  # the search reports why; the target's limit holds regardless
        return load_model(scenario.target), None
    return res.target, draft_max_context(*[m for m in res.kv_models if m.kind == "decoder"])


def fit_context(workload, max_context: int, mode: str):
    """The trace with its requests over ``max_context`` (prompt + output tokens) treated as
    ``mode`` says: ``reject`` leaves it as it is (the engine rejects them), ``drop`` removes
    them, ``truncate`` cuts their output to ``max_context - prompt`` tokens and removes those
    whose prompt alone leaves no room for one output token.  Kept requests keep their
    arrival times, labels and token ids (output ids cut with their output)."""
    from workloads.workload import Workload
    prompt, out, ids = workload.prompt_tokens, workload.output_tokens, workload.output_ids
    over = prompt + out > max_context
    if mode == "reject" or not over.any():
        return workload
    keep = ~over if mode == "drop" else prompt < max_context
    new_out = np.minimum(out, max_context - prompt) if mode == "truncate" else out
    if not keep.any():
        raise SpecsimError(f"every request's prompt + output exceeds max_context {max_context}"
                           + (" and no prompt leaves room for an output token"
                              if mode == "truncate" else ""), field="over_context",
                           source=f"workload {workload.name!r}",
                           fix="use a model with a longer context, or another trace")
    idx = np.flatnonzero(keep)
    def pick(rows):  # noqa: E306
        return None if rows is None else tuple(rows[i] for i in idx)
    return Workload(name=workload.name, arrival_s=workload.arrival_s[idx],
                    prompt_tokens=prompt[idx], output_tokens=new_out[idx],
                    task=None if workload.task is None else workload.task[idx],
                    prompt_ids=pick(workload.prompt_ids), prefix_hashes=pick(
                        workload.prefix_hashes), hash_block_tokens=workload.hash_block_tokens,
                    output_ids=None if ids is None else tuple(ids[i][:new_out[i]] for i in idx))


def preflight(spec: Candidates) -> list[dict[str, Any]]:
    """Before any simulation: each candidate's deployment and policy checked (an error names
    it), its trace's requests over the target's max_context (``over_context``;
    ``prompt_over_context``: the prompt alone leaves no room for an output token) and over the
    draft's (``over_draft_context``; -1 without one); traces read once per workload."""
    from simulator.scenario import scenario_from_dict
    traces, limits, rows = {}, {}, []
    for label, raw in spec.candidates:
        sc = scenario_from_dict(raw, source=label, base_dir=spec.base_dir)
        key = (repr(sorted(sc.workload.items())), sc.seed, sc.base_dir)
        wl = traces[key] = traces[key] if key in traces else scenario_workload(sc)
        check_runnable(sc, workload=wl, where=f"candidate {label}", infeasible_ok=True)
        mkey = (sc.target, sc.draft, sc.policy.name, repr(sc.policy.params), sc.hardware,
                repr(sc.parallelism))
        target, dmax = limits[mkey] = limits[mkey] if mkey in limits else context_limits(sc)
        need = wl.prompt_tokens + wl.output_tokens
        rows.append({"candidate": label, "requests": len(wl), "target": target.name,
                     "max_context": int(target.max_context),
                     "over_context": int(np.count_nonzero(need > target.max_context)),
                     "prompt_over_context": int(np.count_nonzero(
                         wl.prompt_tokens >= target.max_context)),
                     "draft_max_context": -1 if dmax is None else int(dmax), "over_draft_context":
                     -1 if dmax is None else int(np.count_nonzero(need > dmax))})
    return rows


def preflight_lines(rows: list[dict[str, Any]], mode: str = "reject") -> list[str]:
    """One line per distinct pre-flight result (the candidates it covers named when they
    differ): how many requests exceed the contexts and what the plan does with them."""
    groups: dict[tuple, list[str]] = {}
    for r in rows:
        groups.setdefault(tuple(v for k, v in r.items() if k != "candidate"), []).append(
            r["candidate"])
    keys = [k for k in rows[0] if k != "candidate"]
    lines = []
    for values, labels in groups.items():
        r = dict(zip(keys, values))
        n, over = r["requests"], r["over_context"]
        text = (f"pre-flight: {over:,} of {n:,} requests ({over / n:.1%}) have prompt + "
                f"output over {r['target']}'s max_context {r['max_context']:,}")
        if over:
            text += {"reject": ": the engine rejects them (use --drop-over-context or "
                               "--truncate-over-context)",
                     "drop": ": dropped from the trace (--drop-over-context)",
                     "truncate": f": outputs truncated to fit (--truncate-over-context; "
                                 f"{r['prompt_over_context']:,} whose prompt fills the "
                                 "context dropped)"}[mode]
        if r["draft_max_context"] >= 0:
            text += (f"; {r['over_draft_context']:,} over the draft's max_context "
                     f"{r['draft_max_context']:,} (vLLM stops drafting for them there)")
        if len(groups) > 1:
            text += " [" + ", ".join(labels) + "]"
        lines.append(text)
    return lines
