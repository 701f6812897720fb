"""Issue 37: ``estimate`` priced 8M KV tokens on 2 x 80 GB without a word, and defaulted
--draft to opt-125m for every target.  Points that do not fit are flagged (and never the
best); the default draft is the catalog's smallest of the target's family and tokenizer."""
from __future__ import annotations

import io
import math
from contextlib import redirect_stdout

import pandas as pd
import pytest

from simulator.cli import main
from simulator.models.default_draft import default_draft
from simulator.models.spec import list_models, load_model


def _estimate(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["estimate", *argv])
    return code, out.getvalue()


def test_the_default_draft_is_the_smallest_of_the_family_and_tokenizer():
    models = [load_model(n) for n in list_models()]
    for target in (m for m in models if m.kind == "decoder"):
        eligible = [m for m in models if m.kind == "decoder" and m.family == target.family
                    and m.tokenizer_vocab == target.tokenizer_vocab
                    and m.published_params < target.published_params]
        draft = default_draft(target)
        if not eligible:
            assert draft is None, target.name
            continue
        assert draft in eligible, target.name
        assert draft.published_params == min(m.published_params for m in eligible)
    assert default_draft(load_model("opt-13b")).name == "opt-125m"        # as before
    assert default_draft(load_model("llama-3.1-8b")).name == "llama-3.2-1b"


def test_a_target_without_a_catalogued_draft_is_one_error(capsys):
    assert main(["estimate", "--target", "mixtral-8x7b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--draft: the catalog holds no draft for mixtral-8x7b" in err[0]


def test_points_whose_kv_cache_does_not_fit_are_flagged_and_never_best():
    # 1000 sequences of 8000 tokens: 8M KV tokens, 1000 x ceil((8000 + 1) / 16) = 501,000
    # blocks of 16 (the closed form the message states), on 2 x 80 GB
    code, text = _estimate("--target", "llama-3.1-8b", "--hardware", "a100-80gb",
                           "--tensor-parallel", "2", "--batch", "1000", "--context", "8000",
                           "--gamma", "0-3", "--format", "csv")
    assert code == 0
    df = pd.read_csv(io.StringIO(text))
    assert not df["fits"].any() and set(df["limit"]) == {"kv"}
    assert not df["is_best"].any() and df["best_gamma"].isna().all()
    assert f"needs {1000 * math.ceil(8001 / 16):,} KV blocks" in df["infeasible_reason"][0]
    code, text = _estimate("--target", "llama-3.1-8b", "--hardware", "a100-80gb",
                           "--tensor-parallel", "2", "--batch", "1000", "--context", "8000",
                           "--gamma", "0-3")
    assert "NO: kv" in text and "best gamma: none" in text


@pytest.mark.parametrize("context, first_out", [(2040, 7), (2030, 17)])
def test_the_best_gamma_is_the_fastest_that_fits(context, first_out):
    # opt-13b's max_context is 2048: gamma g fits while context + 1 + g < 2048
    code, text = _estimate("--context", str(context), "--gamma", "0-12", "--format", "csv")
    df = pd.read_csv(io.StringIO(text))
    assert (df["fits"] == (df["gamma"] < first_out)).all()
    fits = df[df["fits"]]
    assert df["best_gamma"].iloc[0] == fits.loc[fits["speedup"].idxmax(), "gamma"]
