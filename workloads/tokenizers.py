"""Tokenizers for ``specsim tokenize``: the built-in ``words`` stand-in, Hugging Face, tiktoken.

``words`` is dependency-free and deterministic, and it is a stand-in, not a real tokenizer:
it splits text by the regex ``WORD_PATTERN`` into runs of word characters, runs of
whitespace, and single other characters (punctuation), so its counts differ from a BPE's (a
space is a token of its own, a long identifier is one token; no count was calibrated against
a real tokenizer). What it keeps is what the model-free speculation methods measure: where
text repeats, its ids repeat. Ids are assigned by first appearance (0, 1, 2, ... over the
whole input, prompt before output, request by request), not by hashing: a hash into any id
range small enough for int32 can collide, and a collision fabricates an n-gram match, which
is exactly what prompt lookup and suffix decoding would then count as acceptance. The price
is that ids are per trace (the same word has different ids in two traces), which nothing in
specsim compares.

``hf:<name-or-path>`` uses ``transformers.AutoTokenizer`` and ``tiktoken:<encoding>`` uses
``tiktoken.get_encoding``; both are optional (``pip install transformers`` /
``pip install tiktoken``) and imported only when named.  Neither adds special tokens.
"""
from __future__ import annotations

import importlib
import re
from typing import Callable, Iterable

import numpy as np

from simulator.inputs.errors import SpecsimError
from simulator.inputs.yaml_io import clip, short
from workloads.workload import MAX_REQUESTS, MAX_TOKEN_IDS

WORD_PATTERN = re.compile(r"\w+|\s+|[^\w\s]")
FIELD = "--tokenizer"
KINDS = "words, hf:<name-or-path> or tiktoken:<encoding>"


class WordsTokenizer:
    """Words, whitespace runs and single punctuation characters; ids by first appearance."""

    name = "words"

    def __init__(self) -> None:
        self.vocabulary: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``'s pieces, new pieces numbered in order of first appearance."""
        vocab = self.vocabulary
        return [vocab.setdefault(piece, len(vocab)) for piece in WORD_PATTERN.findall(text)]


class _Wrapped:
    def __init__(self, name: str, encode: Callable[[str], list[int]]) -> None:
        self.name = name
        self.encode = encode


def _optional(module: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise SpecsimError(f"this tokenizer needs {package}, which is not installed",
                           field=FIELD, fix=f"pip install {package}, or use --tokenizer "
                                            "words (a dependency-free stand-in)") from None


def _huggingface(name: str) -> _Wrapped:
    transformers = _optional("transformers", "transformers")
    try:
        tok = transformers.AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # OSError, ValueError, HTTP errors: all mean "cannot load it"
        raise SpecsimError(f"cannot load the Hugging Face tokenizer {short(name)}: "
                           f"{clip(str(exc), 200)}", field=FIELD,
                           fix="give a model id or a local folder with tokenizer files") \
            from None
    return _Wrapped(f"hf:{name}", lambda text: list(tok.encode(text, add_special_tokens=False)))


def _tiktoken(name: str) -> _Wrapped:
    tiktoken = _optional("tiktoken", "tiktoken")
    try:
        enc = tiktoken.get_encoding(name)
    except Exception as exc:  # unknown name, or its BPE file cannot be fetched
        raise SpecsimError(f"cannot load the tiktoken encoding {short(name)}: "
                           f"{clip(str(exc), 200)}", field=FIELD,
                           fix="e.g. --tokenizer tiktoken:cl100k_base") from None
    return _Wrapped(f"tiktoken:{name}", lambda text: list(enc.encode(text,
                                                                    disallowed_special=())))


def load_tokenizer(spec: str):
    """The tokenizer ``spec`` names: ``words``, ``hf:<name-or-path>`` or ``tiktoken:<enc>``."""
    kind, _, name = spec.partition(":")
    if spec == "words":
        return WordsTokenizer()
    if kind in ("hf", "tiktoken") and name.strip():
        return _huggingface(name.strip()) if kind == "hf" else _tiktoken(name.strip())
    raise SpecsimError(f"unknown tokenizer {short(spec)}", field=FIELD, fix="use " + KINDS)


def encode(tokenizer, text: str) -> np.ndarray:
    """``tokenizer.encode(text)`` as an int64 array."""
    return np.asarray(tokenizer.encode(text), dtype=np.int64)


def tokenize_pairs(pairs: Iterable[tuple[str, str, str]], tokenizer, *,
                   source: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Encode ``(where, prompt, output)`` texts one by one: (prompt ids, output ids).

    ``where`` names the request in errors (``line 3``, ``a.prompt.txt``).  A text that
    encodes to no token is an error, and the running totals are checked against
    ``MAX_REQUESTS`` and ``MAX_TOKEN_IDS`` before the next request is read.
    """
    prompts: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    total = 0
    for where, prompt, output in pairs:
        if len(prompts) == MAX_REQUESTS:
            raise SpecsimError(f"{where}: more than {MAX_REQUESTS:,} requests", source=source,
                               fix="split the input, or keep its first requests")
        for field, text, out in (("prompt", prompt, prompts), ("output", output, outputs)):
            ids = encode(tokenizer, text)
            if ids.size == 0:
                raise SpecsimError(f"{where}: the {field} is empty (no tokens)", source=source,
                                   field=field, fix="drop that request, or give it text")
            total += ids.size
            out.append(ids)
        if total > MAX_TOKEN_IDS:
            raise SpecsimError(f"{where}: more than {MAX_TOKEN_IDS:,} token ids up to here",
                               source=source, fix="tokenize fewer or shorter requests (docs/"
                                                  "limits.md)")
    if not prompts:
        raise SpecsimError("no requests", source=source, fix="give at least one request")
    return prompts, outputs
