"""Token counting and sized text, by the estimator (default) or an optional local tokenizer.

The estimator (``attnload.tokens``: 4 UTF-8 bytes per token) needs nothing and matches
the simulator exactly; against a real server its counts are off by the tokenizer's
difference. A model's optional ``tokenizer`` (a local ``tokenizer.json``) fixes that:
prompts are built to the target count with it, and it counts tokens when a server sends
no usage. The ``tokenizers`` package is an optional extra and is imported only when a
tokenizer is asked for, so the default install and import stay light.

Both implement :class:`TextTokens`; ``build_text(n, seed)`` has the *prefix property*
(``build_text(k, s)`` is a prefix of ``build_text(n, s)`` for k ≤ n), which trace replay
relies on to truncate a shared block without breaking prefix sharing.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any, Protocol

from attnload.errors import UsageError
from attnload.measure.tokens import BYTES_PER_TOKEN, text_tokens
from attnload.workload.prompts import filler_text

INSTALL_HINT = "pip install attnload[tokenizer]"

# Common words tried first as one-token building blocks; most tokenizers have each as one token.
_WORDS = (
    "the",
    "cache",
    "memory",
    "attention",
    "model",
    "time",
    "data",
    "value",
    "state",
    "token",
    "batch",
    "head",
    "query",
    "key",
    "layer",
    "graph",
    "server",
    "request",
    "answer",
    "question",
    "system",
    "group",
    "latent",
    "context",
    "length",
    "speed",
    "block",
    "page",
    "table",
    "user",
    "world",
    "water",
    "light",
    "house",
    "number",
    "point",
    "order",
    "field",
    "level",
    "line",
)


class TextTokens(Protocol):
    """What prompt builders need from a token counter."""

    def count(self, text: str) -> int:
        """Tokens in ``text`` (one message's content, no chat template)."""
        ...

    def build_text(self, n_tokens: int, seed: int) -> str:
        """Deterministic text of ``n_tokens`` tokens; a prefix of any longer text of the same seed."""
        ...


class EstimatorTokens:
    """The project's estimator: ``ceil(bytes / 4)`` tokens, filler text of exactly 4 bytes a token."""

    name = "estimator"

    def count(self, text: str) -> int:
        return text_tokens(text)

    def build_text(self, n_tokens: int, seed: int) -> str:
        return filler_text(max(0, n_tokens) * BYTES_PER_TOKEN, seed)


class LocalTokenizer:
    """A ``tokenizer.json`` read with the ``tokenizers`` package (no hub access, no download)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self._tokenizer = _read_tokenizer(self.path)
        self._words: tuple[str, ...] | None = None

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def build_text(self, n_tokens: int, seed: int) -> str:
        """Space-led one-token words, so blocks concatenate additively; checked by counting.

        Each word is a single token after a space, so ``k`` words are ``k`` tokens on every
        tokenizer tried; a tokenizer that merges across words is corrected by a binary
        search on the word count (the largest text not over ``n_tokens``).
        """
        if n_tokens <= 0:
            return ""
        words = self._one_token_words()
        rng = random.Random(seed)
        picked = [words[rng.randrange(len(words))] for _ in range(2 * n_tokens)]
        text = "".join(" " + word for word in picked[:n_tokens])
        if self.count(text) == n_tokens:
            return text
        low, high = 0, len(picked)  # invariant: count(words[:low]) <= n_tokens
        while low < high:
            mid = (low + high + 1) // 2
            if self.count("".join(" " + word for word in picked[:mid])) <= n_tokens:
                low = mid
            else:
                high = mid - 1
        return "".join(" " + word for word in picked[:low])

    def _one_token_words(self) -> tuple[str, ...]:
        if self._words is None:
            found = [word for word in _WORDS if self.count(" " + word) == 1]
            if len(found) < 4:
                found += self._words_from_vocab(limit=64)
            if not found:
                raise UsageError(
                    f"tokenizer {self.path}: no word encodes as one token, so prompts cannot be "
                    "sized with it; use a text tokenizer.json or drop the tokenizer key"
                )
            self._words = tuple(dict.fromkeys(found))
        return self._words

    def _words_from_vocab(self, limit: int) -> list[str]:
        vocab: dict[str, int] = self._tokenizer.get_vocab()
        found: list[str] = []
        for _, token_id in sorted(vocab.items(), key=lambda item: item[1]):
            word = self._tokenizer.decode([token_id]).strip()
            if word.isascii() and word.isalpha() and self.count(" " + word) == 1:
                found.append(word)
                if len(found) >= limit:
                    break
        return found


def load_tokenizer(path: str | os.PathLike[str] | None) -> TextTokens:
    """The model's token counter: its local ``tokenizer.json``, or the estimator when none is set."""
    if path is None:
        return EstimatorTokens()
    return LocalTokenizer(path)


def _read_tokenizer(path: Path) -> Any:
    """Map every failure (package missing, file missing, bad file) to one UsageError line."""
    try:
        from tokenizers import Tokenizer  # the optional extra, imported on use
    except ImportError:
        raise UsageError(
            f"tokenizer {path}: the tokenizers package is not installed; run `{INSTALL_HINT}` or drop the tokenizer key"
        ) from None
    if not path.is_file():
        raise UsageError(f"tokenizer {path}: no such file; give the local path of a tokenizer.json")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust binding raises plain Exception; mapped here, once
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(
            f"tokenizer {path}: not a tokenizers tokenizer.json ({detail}); "
            "use the tokenizer.json shipped with the model"
        ) from None
