"""What each request asks for: profile choice, prompt text, unique salt, output length.

Prefix-cache honesty: every prompt starts with a unique salt unless its profile asks
for a shared prefix, so a server's prefix cache cannot make one model look faster by
serving repeated prompts from cache (docs/design.md, measurement rules).
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from attnload.config.model import Distribution, Profile, TestConfig, sample_count
from attnload.errors import UsageError
from attnload.measure.tokens import BYTES_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS
from attnload.workload.ladder import rung_profile

_FILLER = (
    "attention",
    "cache",
    "memory",
    "bandwidth",
    "latency",
    "throughput",
    "sequence",
    "context",
    "decode",
    "prefill",
    "latent",
    "grouped",
    "query",
    "head",
    "kernel",
    "batch",
)


@dataclass(frozen=True)
class PlannedRequest:
    """One request's content, decided before any model is chosen (paired mode sends it to all)."""

    profile: str
    messages: list[dict[str, Any]]
    max_tokens: int
    ignore_eos: bool = False
    turn: int | None = None
    """1-based turn of a conversation request; None for a single-turn one (no reply text is kept)."""
    calibrated: bool = False
    """The prompt was sized by a ratio learned from the server's usage (``workload.calibration``)."""
    step: int | None = None
    """1-based step of an agent session's request (its reply text is kept); None otherwise."""
    tools: tuple[dict[str, Any], ...] | None = None
    """An agent's tool definitions, sent as the ``tools`` array on every step."""
    tool_choice: str | None = None
    """``tool_choice`` to send with ``tools`` (None: omitted, the server's default)."""


class TextTokens(Protocol):
    """What sizing a prompt needs from a tokenizer; ``workload.tokenizer.TextTokens`` matches it.

    Declared here because ``workload.tokenizer`` imports this module (``filler_text``), so the
    protocol cannot be imported back without a cycle.
    """

    def count(self, text: str) -> int: ...

    def build_text(self, n_tokens: int, seed: int) -> str: ...


def filler_text(n_bytes: int, seed: int) -> str:
    """Deterministic ASCII filler of exactly ``n_bytes`` bytes (4 bytes ≈ 1 token)."""
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < n_bytes:
        word = _FILLER[rng.randrange(len(_FILLER))] + " "
        words.append(word)
        size += len(word)
    return "".join(words)[:n_bytes]


def check_prompts(profiles: Sequence[Profile], shape_sizes_prompts: bool = False) -> None:
    """Every profile says what to send, unless the run's shape sizes every prompt itself (a context ladder)."""
    if shape_sizes_prompts:
        return
    for profile in profiles:
        if not profile.sized:
            raise UsageError(
                f"profile {profile.name!r} needs `prompt` (text) or `prompt_tokens` (a count), "
                "or a shape that sizes prompts itself (--shape context:1k)"
            )


class Workload:
    """Chooses a profile per request (by weight) and builds its messages."""

    def __init__(
        self,
        config: TestConfig,
        profile_names: list[str] | None = None,
        seed: int | None = None,
        shape_sizes_prompts: bool = False,
    ) -> None:
        profiles = [config.profile(name) for name in profile_names] if profile_names else list(config.profiles)
        if not profiles:
            raise UsageError("no workload profile selected: add test_prompts or workload to the config")
        check_prompts(profiles, shape_sizes_prompts)
        self.profiles = profiles
        self.weights = [p.weight for p in profiles]
        self.default_max_tokens = config.request.max_tokens
        self.default_ignore_eos = config.request.ignore_eos
        self.unique_salt = config.request.unique_salt
        self.rng = random.Random(config.seed if seed is None else seed)
        self._prefixes: dict[str, list[str]] = {}
        self._token_prefixes: dict[tuple[str, str], list[str]] = {}
        self.context: int | None = None
        """A context ladder's current rung (set at each stage): every prompt has this many tokens."""
        self.output: int | None = None
        """A decode sweep's pinned answer length (set at each stage; None: the profile's)."""

    def next(self, tokens: TextTokens | None = None) -> PlannedRequest:
        """The next single-turn request; ``tokens`` (a model's tokenizer, None: the estimator) sizes its prompt."""
        return self.plan(self.choose(), tokens)

    def choose(self) -> Profile:
        """A profile by weight (a conversation's profile is chosen once, for all its turns)."""
        return self.rng.choices(self.profiles, self.weights)[0] if len(self.profiles) > 1 else self.profiles[0]

    def plan(self, profile: Profile, tokens: TextTokens | None = None) -> PlannedRequest:
        """One single-turn request of ``profile``, sized by ``tokens`` when a model has a tokenizer."""
        if self.context is not None:
            profile = rung_profile(profile, self.context, self.default_max_tokens, self.output)
        max_tokens = sample_count(profile.max_tokens, self.rng) if profile.max_tokens is not None else None
        ignore_eos = self.default_ignore_eos if profile.ignore_eos is None else profile.ignore_eos
        return PlannedRequest(
            profile=profile.name,
            messages=[{"role": "user", "content": self._content(profile, tokens)}],
            max_tokens=max_tokens or self.default_max_tokens,
            ignore_eos=ignore_eos,
            calibrated=bool(getattr(tokens, "calibrated", False)) and profile.prompt_tokens is not None,
        )

    def _content(self, profile: Profile, tokens: TextTokens | None = None) -> str:
        salt = f"[{uuid.uuid4().hex[:16]}] " if self.unique_salt else ""
        if profile.prompt is not None and profile.prompt_tokens is None:
            return salt + profile.prompt
        assert profile.prompt_tokens is not None
        target_tokens = sample_count(profile.prompt_tokens, self.rng)
        if tokens is not None:
            return self._tokenized(profile, tokens, target_tokens, salt)
        n_bytes = max(0, (target_tokens - MESSAGE_OVERHEAD_TOKENS) * BYTES_PER_TOKEN)
        prefix = ""
        if profile.shared_prefix_ratio > 0:
            # Sized from the profile's nominal length, so every request of a prefix shares
            # the same leading bytes even when prompt_tokens is a distribution.
            nominal = _nominal_tokens(profile.prompt_tokens)
            shared_bytes = int(
                max(0, nominal - MESSAGE_OVERHEAD_TOKENS) * BYTES_PER_TOKEN * profile.shared_prefix_ratio
            )
            prefixes = self._prefixes.setdefault(
                profile.name,
                [
                    filler_text(shared_bytes, seed=zlib.crc32(f"{profile.name}:{i}".encode()))
                    for i in range(profile.prefixes)
                ],
            )
            prefix = prefixes[self.rng.randrange(len(prefixes))][: max(0, n_bytes - len(salt))]
        rest = n_bytes - len(prefix) - len(salt)
        head = profile.prompt or ""
        return prefix + salt + head + filler_text(max(0, rest - len(head.encode())), seed=self.rng.getrandbits(32))

    def _tokenized(self, profile: Profile, tokens: TextTokens, target_tokens: int, salt: str) -> str:
        """The same layout as the estimator's (shared prefix, salt, the profile's text, filler), sized by a tokenizer.

        The content gets ``target_tokens - MESSAGE_OVERHEAD_TOKENS`` tokens, so with the same 4 per message
        the recorded prompt tokens equal the target, as with the estimator. Token counts do not always add
        across a join, so the filler is re-sized until the whole content counts exactly (usually at once).
        """
        budget = max(0, target_tokens - MESSAGE_OVERHEAD_TOKENS)
        head = salt + (profile.prompt or "")
        prefix = ""
        if profile.shared_prefix_ratio > 0:
            prefix = self._token_prefix(profile, tokens, budget - tokens.count(head))
        lead = prefix + head
        seed = self.rng.getrandbits(32)
        want = budget - tokens.count(lead)
        text = lead + tokens.build_text(want, seed)
        for _ in range(_RESIZE_TRIES):
            off = budget - tokens.count(text)
            if off == 0 or want + off < 0:
                break
            want += off
            text = lead + tokens.build_text(want, seed)
        return text

    def _token_prefix(self, profile: Profile, tokens: TextTokens, room: int) -> str:
        """One of the profile's shared prefixes in ``tokens``: built once per tokenizer, cut to ``room`` tokens.

        ``build_text`` has the prefix property, so a cut prefix is still the same leading text.
        """
        nominal = _nominal_tokens(profile.prompt_tokens) if profile.prompt_tokens is not None else 0
        shared = int(max(0, nominal - MESSAGE_OVERHEAD_TOKENS) * profile.shared_prefix_ratio)
        seeds = [zlib.crc32(f"{profile.name}:{i}".encode()) for i in range(profile.prefixes)]
        key = (profile.name, str(getattr(tokens, "name", id(tokens))))
        prefixes = self._token_prefixes.get(key)
        if prefixes is None:
            prefixes = self._token_prefixes[key] = [tokens.build_text(shared, seed) for seed in seeds]
        index = self.rng.randrange(len(prefixes))
        if room >= shared:
            return prefixes[index]
        return tokens.build_text(max(0, room), seeds[index])


_RESIZE_TRIES = 4
"""Filler re-sizes when a join merges or splits tokens; a tokenizer that never settles keeps the last try."""


def _nominal_tokens(count: int | Distribution) -> int:
    if isinstance(count, int):
        return count
    return int(count.value or count.mean or (count.min + count.max) / 2)
