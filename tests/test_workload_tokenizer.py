"""Optional local tokenizer: exact token counts, sized text with the prefix property, clear errors."""

from __future__ import annotations

import builtins
import os
import random
from pathlib import Path
from typing import Any

import pytest

from attnload.errors import UsageError
from attnload.measure.tokens import text_tokens
from attnload.workload.tokenizer import EstimatorTokens, LocalTokenizer, load_tokenizer
from attnload.workload.trace import TracePrompts, TraceRequest

CORPUS = [
    "the cache holds the keys and values of every earlier token in memory",
    "grouped query attention shares each key head among a group of query heads",
    "latent attention stores a small latent state per token and projects it back",
    "the server answers each request and streams the answer token by token",
    "a batch of users asks a question and the model answers with a long reply",
] * 4


def word_level(tmp_path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(CORPUS, tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path / "wordlevel.json"
    tokenizer.save(str(path))
    return path


def byte_bpe(tmp_path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    path = tmp_path / "bpe.json"
    tokenizer.save(str(path))
    return path


@pytest.mark.parametrize("make", [word_level, byte_bpe])
def test_build_text_has_exactly_n_tokens_and_the_prefix_property(tmp_path: Path, make: Any) -> None:
    tok = LocalTokenizer(make(tmp_path))
    for n in (1, 7, 100, 512):
        text = tok.build_text(n, seed=3)
        assert tok.count(text) == n
        assert text == tok.build_text(n, seed=3)
        assert tok.build_text(n * 2, seed=3).startswith(text)
    assert tok.build_text(0, seed=1) == ""
    assert tok.build_text(50, seed=1) != tok.build_text(50, seed=2)


def test_word_level_counts_words(tmp_path: Path) -> None:
    tok = LocalTokenizer(word_level(tmp_path))
    assert tok.count("the cache holds the keys") == 5
    assert tok.count("") == 0


def test_trace_blocks_with_a_tokenizer_share_prefixes(tmp_path: Path) -> None:
    tok = LocalTokenizer(word_level(tmp_path))
    prompts = TracePrompts("[0123456789abcdef] ", tokens=tok, block_tokens=16)
    a = prompts.content(TraceRequest(0.0, 60, 1, (1, 2, 3)), 0)
    b = prompts.content(TraceRequest(0.0, 60, 1, (1, 2, 4)), 1)
    block = tok.build_text(16, seed=0)  # any block is 16 one-token words
    assert tok.count(block) == 16
    common = os.path.commonprefix([a, b])
    assert tok.count(common) >= 2 * 16


def test_estimator_implements_the_same_interface() -> None:
    est = load_tokenizer(None)
    assert isinstance(est, EstimatorTokens)
    text = est.build_text(25, seed=4)
    assert len(text.encode()) == 100 and est.count(text) == 25 == text_tokens(text)
    assert est.build_text(40, seed=4).startswith(text)


def test_missing_file_and_bad_file_are_usage_errors(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    with pytest.raises(UsageError, match=r"no such file; give the local path of a tokenizer.json"):
        load_tokenizer(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(UsageError, match=r"^tokenizer .*bad.json: not a tokenizers tokenizer.json \(") as info:
        load_tokenizer(bad)
    assert "\n" not in str(info.value)


def test_missing_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_tokenizers(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "tokenizers" or name.startswith("tokenizers."):
            raise ImportError("No module named 'tokenizers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    with pytest.raises(UsageError, match=r"pip install attnload\[tokenizer\]"):
        load_tokenizer(tmp_path / "tokenizer.json")


def test_no_single_token_word_is_refused(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())  # bytes only, no merges: every word is many tokens
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    tokenizer.train_from_iterator(
        ["ab"], tokenizers.trainers.BpeTrainer(vocab_size=len(alphabet), initial_alphabet=alphabet)
    )
    path = tmp_path / "bytes.json"
    tokenizer.save(str(path))
    tok = LocalTokenizer(path)
    with pytest.raises(UsageError, match="no word encodes as one token"):
        tok.build_text(5, seed=random.Random(0).getrandbits(8))
