"""A context ladder's requests (``--shape context:1k,16k``): every prompt of a rung has the rung's length and
every answer a pinned length, so the only thing that changes from stage to stage is the context.

A rung asks for ``context`` prompt tokens; whatever sizes single-turn prompts sizes it too: a model's
``tokenizer`` (exact), else the ratio learned from the server's ``usage`` (``workload.calibration``), else
the shared estimator (which the simulator counts the same way). A decode sweep (``decode:1k-32k``) pins its
answer to reach the end length (``check_decode``); ``parse_tokens`` and ``parse_users_list`` read the token
counts and ``--users`` lists of these shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnload.config.limits import MAX_USERS
from attnload.config.model import Distribution, Profile, TestConfig
from attnload.errors import UsageError


def pinned_max_tokens(profile: Profile, default: int) -> int:
    """The output length every request of a rung asks for: the profile's fixed ``max_tokens`` (a distribution's
    nominal value), else the request setting."""
    value = profile.max_tokens
    if value is None:
        return default
    if isinstance(value, int):
        return value
    return _nominal(value)


def _nominal(count: Distribution) -> int:
    return int(count.value or count.mean or (count.min + count.max) / 2)


def rung_profile(profile: Profile, context: int, default_max_tokens: int, output: int | None = None) -> Profile:
    """``profile`` at a rung: prompt of ``context`` tokens, output pinned (``max_tokens`` + ``ignore_eos``) to
    ``output`` when given (a decode sweep's), else to the profile's length."""
    return profile.model_copy(
        update={
            "prompt_tokens": context,
            "max_tokens": output if output is not None else pinned_max_tokens(profile, default_max_tokens),
            "ignore_eos": True,
        }
    )


def check_ladder(config: TestConfig, contexts: Sequence[int], profiles: Sequence[Profile] | None = None) -> None:
    """Refuse, before anything is sent, a rung whose prompt plus answer cannot fit a model's ``max_context``."""
    chosen = list(profiles) if profiles else list(config.profiles)
    answer = max(pinned_max_tokens(p, config.request.max_tokens) for p in chosen)
    longest = max(contexts)
    for target in config.models:
        if target.max_context is not None and longest + answer > target.max_context:
            raise UsageError(
                f"context ladder rung {longest:,} + max_tokens {answer:,} = {longest + answer:,} tokens exceeds "
                f"model {target.key}'s max_context {target.max_context:,}: lower the rung or raise max_context"
            )
    for profile in chosen:
        if profile.conversational:
            raise UsageError(
                f"profile {profile.name!r} is a conversation or dataset: a context ladder sizes single prompts; "
                "pick another profile with --profile"
            )


def check_decode(config: TestConfig, start: int, end: int, profiles: Sequence[Profile] | None = None) -> None:
    """Refuse, before anything is sent, a decode sweep whose end is over a model's ``max_context``."""
    for target in config.models:
        if target.max_context is not None and end > target.max_context:
            raise UsageError(
                f"decode sweep end {end:,} tokens exceeds model {target.key}'s max_context {target.max_context:,}: "
                "lower the end (decode:START-END) or raise max_context"
            )
    for profile in list(profiles) if profiles else list(config.profiles):
        if profile.conversational:
            raise UsageError(
                f"profile {profile.name!r} is a conversation or dataset: a decode sweep sizes single prompts "
                f"({start:,} tokens); pick another profile with --profile"
            )


def parse_tokens(text: str) -> int:
    """``1k`` → 1024, ``32K`` → 32768, ``1m`` → 1048576, ``1500`` → 1500; anything else raises ValueError."""
    value = text.strip().lower()
    scale = {"k": 1024, "m": 1024 * 1024}.get(value[-1:], 1)
    number = float(value[:-1] if scale > 1 else value)
    tokens = number * scale
    if not math.isfinite(tokens) or tokens != int(tokens):
        raise ValueError(text)
    return int(tokens)


def parse_users_list(text: str, what: str = "--users") -> tuple[int, ...]:
    """``8`` or ``1,8,32``: closed-loop users (each from 1 to MAX_USERS)."""
    users = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part.isdigit() or not 1 <= int(part) <= MAX_USERS:
            raise UsageError(f"{what} {text!r}: {part!r} must be a whole number of users from 1 to {MAX_USERS:,}")
        users.append(int(part))
    return tuple(users)
