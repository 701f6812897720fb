"""Medusa heads: per-head top-k accuracies as tree acceptance (Cai et al., 2024).

Head h (0-based) drafts position h+1 of the chain.  Its top-k accuracies were measured with
the true prefix, so they are read as the coverage given an accepted path, heads independent
-- the same product rule Medusa uses to build its candidate tree.  A model with H heads
cannot draft deeper than H.

Default table: top-1..top-5 accuracies of the five heads for Vicuna 7B/13B/33B, rounded to
4 decimals, from FasterDecoding/Medusa ``assets/medusa_acc.csv`` (Apache-2.0; columns
``train/medusa{h}_top{k}``; the 33b run is marked "failed" there but logged these values).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from simulator.acceptance.fields import model_config
from simulator.acceptance.tree_topk import TopKCoverageAcceptance, parse_coverage
from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import as_str
from simulator.speculation.token_tree import TokenTree
from simulator.speculation.tree_shapes import best_tree

MEDUSA_SOURCE = ("Medusa (Cai et al., ICML 2024), FasterDecoding/Medusa assets/medusa_acc.csv: "
                 "top-1..top-5 accuracy of each Medusa-1 head on Vicuna 7B/13B/33B")
MEDUSA_TOP_K: dict[str, tuple[tuple[float, ...], ...]] = {
    "7b": ((0.5604, 0.6717, 0.7271, 0.7599, 0.7799),
           (0.3164, 0.4236, 0.4851, 0.5282, 0.5625),
           (0.2010, 0.2879, 0.3475, 0.3834, 0.4169),
           (0.1474, 0.2250, 0.2737, 0.3109, 0.3397),
           (0.1175, 0.1866, 0.2346, 0.2721, 0.2998)),
    "13b": ((0.5939, 0.7053, 0.7578, 0.7925, 0.8161),
            (0.3397, 0.4400, 0.5068, 0.5465, 0.5803),
            (0.2161, 0.3085, 0.3612, 0.4030, 0.4364),
            (0.1500, 0.2317, 0.2878, 0.3234, 0.3541),
            (0.1223, 0.1957, 0.2434, 0.2791, 0.3070)),
    "33b": ((0.6046, 0.7162, 0.7649, 0.7983, 0.8223),
            (0.3558, 0.4690, 0.5287, 0.5692, 0.5961),
            (0.2246, 0.3197, 0.3785, 0.4210, 0.4462),
            (0.1596, 0.2488, 0.3073, 0.3480, 0.3755),
            (0.1370, 0.2067, 0.2621, 0.2984, 0.3258)),
}
# Medusa's default sparse tree mc_sim_7b_63 (FasterDecoding/Medusa medusa/model/medusa_choices.py)
# has 63 nodes; its ranks reach top-10, past the top-5 the table lists, so it is read as the 63
# nodes of highest path probability (the medusa policy's default tree, the same budget)
MEDUSA_TREE_NODES = 63


def medusa_tree(size: str = "7b") -> TokenTree:
    """The ``MEDUSA_TREE_NODES`` candidates of highest path probability under ``size``'s table
    (exclusive rank probabilities: the differences of each head's cumulative top-k)."""
    cov = np.asarray(MEDUSA_TOP_K[size])
    return best_tree(np.diff(cov, axis=1, prepend=0.0), MEDUSA_TREE_NODES)



def with_table(acc: Mapping[str, Any]) -> dict[str, Any]:
    """A ``medusa`` acceptance mapping with its size's table written out as ``top_k``, the
    probabilities an acceptance spread shifts; any other mapping as it is."""
    out = dict(acc)
    if out.get("model") == "medusa" and "top_k" not in out \
            and out.get("size", "7b") in MEDUSA_TOP_K:
        out["top_k"] = [list(row) for row in MEDUSA_TOP_K[out.pop("size", "7b")]]
    return out

@dataclass(frozen=True)
class MedusaAcceptance(TopKCoverageAcceptance):
    """Top-k coverage with one row per Medusa head and no drafting past the last head."""

    name: ClassVar[str] = "medusa"

    @classmethod
    def published(cls, size: str = "7b") -> "MedusaAcceptance":
        """Medusa's published head accuracies for Vicuna ``size`` (7b, 13b or 33b)."""
        if size not in MEDUSA_TOP_K:
            raise SpecsimError(f"unknown Medusa table {size!r}", field="size",
                               fix="choose one of: " + ", ".join(MEDUSA_TOP_K))
        table = MEDUSA_TOP_K[size]
        return cls(table, max_depth=len(table))

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], *, source: str) -> "MedusaAcceptance":
        cfg = model_config(cfg, allowed=("size", "top_k"), source=source)
        if "top_k" in cfg:
            if "size" in cfg:
                raise SpecsimError("give 'size' or 'top_k', not both", source=source,
                                   field="top_k")
            cov = parse_coverage(cfg["top_k"], source=source, field="top_k")
            return cls(tuple(map(tuple, cov)), max_depth=len(cov))
        size = as_str(cfg.get("size", "7b"), source=source, field="size",
                      choices=list(MEDUSA_TOP_K))
        return cls.published(size)
