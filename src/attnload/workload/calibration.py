"""Prompt sizes calibrated from the server: learn how a model's tokenizer counts attnload's prompts.

Without a model ``tokenizer`` attnload sizes prompts with its estimator (4 bytes a token), which a
real tokenizer counts differently (vLLM counted the tiny test models' 256 as ~150; others count more). The
server says how many tokens it saw (``usage.prompt_tokens``), so each process learns, per model, how
server counts follow its estimates and sizes later prompts to land on their target:

- ``observe(estimated, server_counted)`` after each answer that reported usage;
- ``scale(target)``: the estimated tokens to ask the prompt builder for so that the server counts
  ``target`` (``target`` itself until ``CALIBRATION_RESPONSES`` answers are in).

The fit is robust and keeps fixed parts apart: observations are kept per size band (at most
``KEPT_PER_SIZE`` each, so memory is bounded and later sizes of a ladder still teach it); over one size
the model is a ratio (the median of ``server / estimated``, which lands a prompt of that size exactly,
the chat template included); once sizes differ by ``FIT_SPAN`` or more, a Theil–Sen line (median slope,
median intercept) separates the per-token ratio from fixed overhead (template, system prompt), so a
ratio learned on short prompts does not mis-size long ones. :class:`CalibratedTokens` shows one model's
calibration to the builder as a ``TextTokens`` (count and build text in server tokens).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from attnload.measure.tokens import BYTES_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, prompt_tokens, text_tokens
from attnload.workload.prompts import filler_text

CALIBRATION_RESPONSES = 5
"""Answers with usage a model needs before its prompts are sized by the learned ratio."""
KEPT_PER_SIZE = 8
"""Observations kept per size band (the first ones; later ones add nothing)."""
SIZE_BANDS_PER_DOUBLING = 8
"""Size bands are ~9 % wide (8 per doubling): a calibrated size lands in another band than the first."""
FIT_SPAN = 1.15
"""Largest ÷ smallest estimated size from which a line (ratio plus fixed part) is fitted."""


class PromptCalibration:
    """One model's server-counted ÷ estimated prompt tokens, learned from its first answers."""

    def __init__(self, responses: int = CALIBRATION_RESPONSES) -> None:
        self.responses = responses
        self._kept: dict[int, list[tuple[int, int]]] = {}
        self._count = 0
        self._line: tuple[float, float] | None = None
        """(slope, intercept): server tokens ≈ slope × estimated + intercept; None: not ready."""

    @property
    def ready(self) -> bool:
        """Whether enough answers came in to size prompts by the calibration."""
        return self._line is not None

    @property
    def ratio(self) -> float | None:
        """Median server ÷ estimated prompt tokens over the kept answers (None: none yet)."""
        points = self._points()
        return statistics.median(s / e for e, s in points) if points else None

    def observe(self, estimated: int, server_counted: int) -> None:
        """One answer: the estimator's count of the prompt sent, and the server's ``usage.prompt_tokens``."""
        if estimated <= 0 or server_counted <= 0:
            return
        kept = self._kept.setdefault(round(math.log2(estimated) * SIZE_BANDS_PER_DOUBLING), [])
        if len(kept) >= KEPT_PER_SIZE:
            return
        kept.append((estimated, server_counted))
        self._count += 1
        if self._count >= self.responses:
            self._line = _fit(self._points())

    def predict(self, estimated: float) -> float:
        """Server tokens expected for a prompt the estimator counts at ``estimated``."""
        if self._line is None:
            return float(estimated)
        slope, intercept = self._line
        return slope * estimated + intercept

    def scale(self, target: int) -> int:
        """Estimated tokens to ask the prompt builder for, so that the server counts ``target``."""
        if self._line is None:
            return target
        slope, intercept = self._line
        return max(1, round((target - intercept) / slope))

    def _points(self) -> list[tuple[int, int]]:
        return [point for kept in self._kept.values() for point in kept]


def _fit(points: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """A ratio over one size; a Theil–Sen line once the sizes span ``FIT_SPAN`` (falls back to the ratio)."""
    ratio = statistics.median(s / e for e, s in points)
    low, high = min(e for e, _ in points), max(e for e, _ in points)
    if high < FIT_SPAN * low:
        return ratio, 0.0
    slopes = [(s2 - s1) / (e2 - e1) for i, (e1, s1) in enumerate(points) for e2, s2 in points[i + 1 :] if e2 != e1]
    slope = statistics.median(slopes)
    if slope <= 0:
        return ratio, 0.0
    return slope, statistics.median(s - slope * e for e, s in points)


class CalibratedTokens:
    """A model's calibration as the prompt builder's ``TextTokens``: counts and sizes in server tokens.

    ``count`` is one message's content as the server would count it (its whole prompt less the 4 the
    builder adds per message); ``build_text`` is the estimator's filler at the calibrated size, so
    ``build_text(k, s)`` is still a prefix of ``build_text(n, s)``.
    """

    calibrated = True
    """Prompts sized through this object are marked calibrated (``PlannedRequest.calibrated``)."""

    def __init__(self, key: str, calibration: PromptCalibration) -> None:
        self.name = f"calibrated:{key}"
        self.calibration = calibration

    def count(self, text: str) -> int:
        whole = self.calibration.predict(text_tokens(text) + MESSAGE_OVERHEAD_TOKENS)
        return max(0, round(whole) - MESSAGE_OVERHEAD_TOKENS)

    def build_text(self, n_tokens: int, seed: int) -> str:
        if n_tokens <= 0:
            return ""
        estimated = self.calibration.scale(n_tokens + MESSAGE_OVERHEAD_TOKENS) - MESSAGE_OVERHEAD_TOKENS
        return filler_text(max(0, estimated) * BYTES_PER_TOKEN, seed)


class Calibrations:
    """Per process: every model's calibration, by model key."""

    def __init__(self, responses: int = CALIBRATION_RESPONSES) -> None:
        self.responses = responses
        self._models: dict[str, PromptCalibration] = {}
        self._tokens: dict[str, CalibratedTokens] = {}

    def model(self, key: str) -> PromptCalibration:
        """``key``'s calibration (created empty on first use)."""
        found = self._models.get(key)
        if found is None:
            found = self._models[key] = PromptCalibration(self.responses)
        return found

    def observe(self, key: str, messages: Sequence[Mapping[str, object]], server_counted: int) -> None:
        """One answer of ``key`` to ``messages``: the estimator's count beside the server's."""
        self.model(key).observe(prompt_tokens(messages), server_counted)

    def sizer(self, key: str) -> CalibratedTokens | None:
        """What sizes ``key``'s prompts: its calibration once ready, else None (the estimator)."""
        if not self.model(key).ready:
            return None
        tokens = self._tokens.get(key)
        if tokens is None:
            tokens = self._tokens[key] = CalibratedTokens(key, self.model(key))
        return tokens
