"""What each request asks for: profile choice, prompt text, unique salt, output length.

Prefix-cache honesty: every prompt starts with a unique salt unless its profile asks
for a shared prefix, so a server's prefix cache cannot make one model look faster by
serving repeated prompts from cache (DESIGN.md measurement rules).
"""

from __future__ import annotations

import random
import uuid
import zlib
from dataclasses import dataclass

from attnload.config.model import Distribution, Profile, TestConfig, sample_count
from attnload.errors import UsageError
from attnload.measure.tokens import BYTES_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS

_FILLER = ("attention", "cache", "memory", "bandwidth", "latency", "throughput", "sequence", "context",
           "decode", "prefill", "latent", "grouped", "query", "head", "kernel", "batch")


@dataclass(frozen=True)
class PlannedRequest:
    """One request's content, decided before any model is chosen (paired mode sends it to all)."""

    profile: str
    messages: list[dict[str, str]]
    max_tokens: int
    ignore_eos: bool = False
    turn: int | None = None
    """1-based turn of a conversation request; None for a single-turn one (no reply text is kept)."""


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


class Workload:
    """Chooses a profile per request (by weight) and builds its messages."""

    def __init__(self, config: TestConfig, profile_names: list[str] | None = None, seed: int | None = None) -> None:
        profiles = [config.profile(name) for name in profile_names] if profile_names else list(config.profiles)
        if not profiles:
            raise UsageError("no workload profile selected: add test_prompts or workload to the config")
        self.profiles = profiles
        self.weights = [p.weight for p in profiles]
        self.default_max_tokens = config.request.max_tokens
        self.default_ignore_eos = config.request.ignore_eos
        self.unique_salt = config.request.unique_salt
        self.rng = random.Random(config.seed if seed is None else seed)
        self._prefixes: dict[str, list[str]] = {}

    def next(self) -> PlannedRequest:
        return self.plan(self.choose())

    def choose(self) -> Profile:
        """A profile by weight (a conversation's profile is chosen once, for all its turns)."""
        return self.rng.choices(self.profiles, self.weights)[0] if len(self.profiles) > 1 else self.profiles[0]

    def plan(self, profile: Profile) -> PlannedRequest:
        """One single-turn request of ``profile``."""
        max_tokens = sample_count(profile.max_tokens, self.rng) if profile.max_tokens is not None else None
        ignore_eos = self.default_ignore_eos if profile.ignore_eos is None else profile.ignore_eos
        return PlannedRequest(profile=profile.name, messages=[{"role": "user", "content": self._content(profile)}],
                              max_tokens=max_tokens or self.default_max_tokens, ignore_eos=ignore_eos)

    def _content(self, profile: Profile) -> str:
        salt = f"[{uuid.uuid4().hex[:16]}] " if self.unique_salt else ""
        if profile.prompt is not None and profile.prompt_tokens is None:
            return salt + profile.prompt
        assert profile.prompt_tokens is not None
        target_tokens = sample_count(profile.prompt_tokens, self.rng)
        n_bytes = max(0, (target_tokens - MESSAGE_OVERHEAD_TOKENS) * BYTES_PER_TOKEN)
        prefix = ""
        if profile.shared_prefix_ratio > 0:
            # Sized from the profile's nominal length, so every request of a prefix shares
            # the same leading bytes even when prompt_tokens is a distribution.
            nominal = _nominal_tokens(profile.prompt_tokens)
            shared_bytes = int(max(0, nominal - MESSAGE_OVERHEAD_TOKENS) * BYTES_PER_TOKEN * profile.shared_prefix_ratio)
            prefixes = self._prefixes.setdefault(profile.name, [
                filler_text(shared_bytes, seed=zlib.crc32(f"{profile.name}:{i}".encode())) for i in range(profile.prefixes)])
            prefix = prefixes[self.rng.randrange(len(prefixes))][:max(0, n_bytes - len(salt))]
        rest = n_bytes - len(prefix) - len(salt)
        head = profile.prompt or ""
        return prefix + salt + head + filler_text(max(0, rest - len(head.encode())), seed=self.rng.getrandbits(32))


def _nominal_tokens(count: int | Distribution) -> int:
    if isinstance(count, int):
        return count
    return int(count.value or count.mean or (count.min + count.max) / 2)
