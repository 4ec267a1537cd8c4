"""The continuous-batching scheduler (docs/cost-model.md §4), synchronous and clock-free.

This is the engine's core: one FCFS queue per served model, D attention groups with
their own KV blocks, ``max_num_seqs`` and token budget, chunked prefill, recompute
preemption and a ref-counted LRU prefix cache. It knows nothing about asyncio: the
caller passes ``now`` to :meth:`Scheduler.plan` (admit, plan, return the step's
duration) and :meth:`Scheduler.complete` (emit tokens, preempt, free). The wall-clock
engine (``engine.py``) and the virtual closed-loop driver (``virtual.py``) both drive it,
so tests exercise the exact code that serves HTTP.

Cost per step is O(running sequences) with small constants: one pass to plan, one to emit.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from attnload.sim.api import EngineRejected, GenerationState
from attnload.sim.costmodel import Deployment, GroupLoad, StepBreakdown
from attnload.sim.decode.speculation import Speculator

PREFIX_BLOCK_TOKENS = 16  # one 64-byte prompt block (§4.5)
AFFINITY_IMBALANCE_SEQS = 32
"""Cache-aware DP routing (as SGLang's router ``cache_aware`` policy, with its ``balance_abs_threshold``):
a request of which one attention group alone holds a cached quarter of the prompt or more (beyond what
the next best group holds) goes there, unless that group runs this many more sequences than the least
busy one. Without it an agent session's next step would land on whichever group has the most free
blocks and miss the history its previous step left in another."""


class SimSequence:
    """One request inside the scheduler: prompt, progress, blocks held and where it lives."""

    __slots__ = (
        "request_id",
        "prompt_tokens",
        "max_tokens",
        "hashes",
        "state",
        "group",
        "generated",
        "computed",
        "target",
        "private_blocks",
        "cache_refs",
        "hashable_blocks",
        "arrival_s",
        "first_token_s",
        "last_token_s",
        "finished",
        "cancelled",
        "ready",
        "waiter",
        "admissions",
    )

    def __init__(
        self,
        request_id: str,
        prompt_tokens: int,
        max_tokens: int,
        hashes: Sequence[int] = (),
        state: GenerationState | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.hashes = hashes
        self.state = state if state is not None else GenerationState()
        self.group: _Group | None = None
        self.generated = 0
        self.computed = 0
        """Tokens whose KV exists (cached prefix + prefilled chunks) in the current admission."""
        self.target = prompt_tokens
        """Tokens to prefill in this admission: the prompt, or prompt + generated after preemption."""
        self.private_blocks = 0
        self.cache_refs: list[int] = []
        self.hashable_blocks = 0
        self.arrival_s = 0.0
        self.first_token_s: float | None = None
        self.last_token_s = 0.0
        self.finished = False
        self.cancelled = False
        self.ready = 0  # tokens emitted but not yet taken by the consumer (async engine)
        self.waiter: asyncio.Future[None] | None = None  # set by the async engine while its consumer waits
        self.admissions = 0

    @property
    def prefilling(self) -> bool:
        return self.computed < self.target


class _Group:
    """One attention group: its sequences, KV blocks and prefix cache."""

    __slots__ = ("index", "total_blocks", "private_used", "running", "cache", "lru")

    def __init__(self, index: int, total_blocks: int) -> None:
        self.index = index
        self.total_blocks = total_blocks
        self.private_used = 0
        self.running: dict[SimSequence, None] = {}  # admission order; O(1) removal
        self.cache: dict[int, int] = {}  # block hash -> refcount
        self.lru: OrderedDict[int, None] = OrderedDict()  # cache-only blocks (refcount 0), oldest first

    @property
    def free_blocks(self) -> int:
        return self.total_blocks - self.private_used - len(self.cache)

    @property
    def available_blocks(self) -> int:
        """Free plus evictable cache-only blocks."""
        return self.free_blocks + len(self.lru)

    def leading_hits(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """(matched leading blocks, how many of them are cache-only) in this group's cache."""
        matched = evictable = 0
        cache = self.cache
        for h in hashes[:limit]:
            refs = cache.get(h)
            if refs is None:
                break
            matched += 1
            evictable += refs == 0
        return matched, evictable

    def ref(self, h: int) -> None:
        refs = self.cache[h]
        if refs == 0:
            del self.lru[h]
        self.cache[h] = refs + 1

    def evict_one(self) -> bool:
        if not self.lru:
            return False
        h, _ = self.lru.popitem(last=False)
        del self.cache[h]
        return True


TokenSink = Callable[[SimSequence, int], None]


class Scheduler:
    """Admission, planning and emission for one served model; see the module docstring."""

    def __init__(
        self,
        dep: Deployment,
        on_tokens: TokenSink,
        on_finish: Callable[[SimSequence], None] | None = None,
    ) -> None:
        self.dep = dep
        self.block_size = dep.cfg.block_size
        # Prompt hashes cover 16-token blocks; caching needs KV blocks of the same size.
        self.prefix_cache = dep.cfg.prefix_cache and self.block_size == PREFIX_BLOCK_TOKENS
        self.recompute = dep.cfg.preemption == "recompute"
        self.groups = [_Group(i, dep.blocks_per_group) for i in range(dep.dp)]
        self.queue: deque[SimSequence] = deque()
        self.on_tokens = on_tokens
        self.on_finish = on_finish
        self.preemptions_total = 0
        self.cached_prompt_tokens_total = 0
        self.scheduled_gaps: list[float] | None = None
        """If the owner sets a list: per token after a sequence's first, simulated time since its
        previous token (the ITL the model's schedule sets, stalls included); the owner drains it."""
        self.max_waiting_seen = 0
        self.steps_fast_forwarded = 0
        """Largest queue length left after an admission pass (> 0: requests waited for KV/slots)."""
        self._plan: list[tuple[_Group, list[SimSequence], list[tuple[SimSequence, int]]]] = []
        self.mix_prefill_decode = dep.cfg.mix_prefill_decode
        self.chunked_prefill = dep.cfg.chunked_prefill
        self._prefilling = 0
        """Running sequences with prefill work left (admitted and not yet at their target)."""
        self.last_step: StepBreakdown | None = None
        """The breakdown of the step :meth:`plan` planned last (the engine's GPU telemetry reads it)."""
        cfg = dep.cfg
        self.speculator = Speculator(cfg.spec_tokens, cfg.spec_acceptance, cfg.seed) if cfg.spec_tokens else None
        """Speculative decoding (``--spec-tokens``): each decode verifies K + 1 tokens and emits 1 + accepted."""
        self._query = 1 + cfg.spec_tokens

    # ------------------------------------------------------------------ requests in and out

    def check(self, prompt_tokens: int, max_tokens: int) -> None:
        """Raise the §4.2 400 before a request is accepted: it could never run on one group."""
        total = prompt_tokens + max_tokens
        if total > self.dep.preset.max_model_len:
            raise EngineRejected(
                400,
                "context_length_exceeded",
                f"prompt ({prompt_tokens}) + max_tokens ({max_tokens}) exceeds the model's "
                f"maximum context length of {self.dep.preset.max_model_len} tokens",
            )
        if total + self.block_size > self.dep.group_kv_tokens:
            raise EngineRejected(
                400,
                "context_length_exceeded",
                f"prompt ({prompt_tokens}) + max_tokens ({max_tokens}) exceeds the KV capacity "
                f"of one attention group ({self.dep.group_kv_tokens} tokens)",
            )

    def submit(self, seq: SimSequence, now_s: float) -> None:
        """Queue a checked request (FCFS); it is admitted at the next :meth:`plan`."""
        seq.arrival_s = now_s
        if self.prefix_cache:
            seq.hashable_blocks = min(len(seq.hashes), seq.prompt_tokens // PREFIX_BLOCK_TOKENS)
        self.queue.append(seq)

    def cancel(self, seq: SimSequence) -> None:
        """The consumer went away: drop the request wherever it is and free its blocks."""
        if seq.finished or seq.cancelled:
            return
        seq.cancelled = True
        if seq.group is not None:
            self._release(seq)
        else:
            try:
                self.queue.remove(seq)
            except ValueError:
                pass

    def sequences(self) -> list[SimSequence]:
        """Every request the scheduler holds, queued or running."""
        return [*self.queue, *(seq for g in self.groups for seq in g.running)]

    def has_work(self) -> bool:
        return bool(self.queue) or any(g.running for g in self.groups)

    # ------------------------------------------------------------------ one step

    def plan(self, now_s: float) -> float | None:
        """Admit from the queue, plan each group's tokens; the step's duration, or None if idle.

        Engine profiles (``EngineConfig``) shape the plan: without ``mix_prefill_decode`` a step
        that has prefill work anywhere runs prefill chunks only, so every group's decodes wait
        (SGLang's DP attention); without ``chunked_prefill`` a prompt goes in whole or not at all.
        """
        self._admit()
        self.max_waiting_seen = max(self.max_waiting_seen, len(self.queue))
        plan = []
        loads = []
        prefill_only = not self.mix_prefill_decode and self._prefilling > 0
        chunked = self.chunked_prefill
        per_group = self.dep.batched_tokens_per_group
        for g in self.groups:
            if not g.running:
                continue
            decodes: list[SimSequence] = []
            chunks: list[tuple[SimSequence, int]] = []
            ctx = 0
            if not prefill_only:
                for seq in g.running:
                    if seq.computed >= seq.target:
                        decodes.append(seq)
                        ctx += seq.prompt_tokens + seq.generated
            query = self._query
            budget = per_group - len(decodes) * query
            pairs = prefix = 0.0
            kv_read = float(ctx)
            for seq in g.running:
                if budget <= 0:
                    break
                if seq.computed < seq.target:
                    rest = seq.target - seq.computed
                    if chunked or rest <= budget:
                        c = min(budget, rest)
                    elif not chunks:
                        c = rest  # a whole prompt larger than the budget goes alone (no starvation)
                    else:
                        break
                    l0 = seq.computed
                    chunks.append((seq, c))
                    pairs += c * l0 + c * (c + 1) / 2
                    kv_read += l0 + c
                    prefix += l0
                    budget -= c
            tokens = len(decodes) * query + sum(c for _, c in chunks)
            if tokens:
                plan.append((g, decodes, chunks))
                loads.append(GroupLoad(tokens, float(ctx * query), pairs, kv_read, prefix))
        self._plan = plan
        if not loads:
            return None
        self.last_step = self.dep.step_breakdown(loads)
        return self.last_step.total_s

    def fast_forward(self, now_s: float, max_steps: int, on_step: Callable[[float, int], None]) -> float:
        """Run up to ``max_steps`` pure-decode steps in bulk when nothing can happen in between.

        Applies only between steps when no sequence is prefilling, the queue's head cannot be
        admitted, no sequence finishes and no group runs out of free blocks within the run: then
        each step's load is known in advance (every decode adds one token of context), so the
        steps cost O(D) each instead of O(running). ``on_step(step_s, decodes)`` is called per
        step (for the first, each sequence's own gap goes to ``scheduled_gaps`` when the owner set
        it); the end time is returned (``now_s`` if no step was taken). Tokens are delivered once
        per sequence at the end (``on_tokens(seq, k)``), with ``last_token_s`` at the last step.
        Results equal those of :meth:`plan`/:meth:`complete` step by step (the offline driver's
        tests check it); the HTTP engine does not use it.
        """
        if self._plan or self._prefilling or max_steps < 2 or self.speculator is not None:
            return now_s  # speculative steps emit a random number of tokens: not known in advance
        if self.queue and self._choose(self.queue[0]) is not None:
            return now_s
        running = [(g, seq) for g in self.groups for seq in g.running]
        if not running:
            return now_s
        steps = min(seq.max_tokens - seq.generated for _, seq in running) - 1
        steps = min(steps, max_steps)
        if steps < 2:
            return now_s
        bs = self.block_size
        if self.recompute:
            steps = self._steps_with_free_blocks(steps)
            if steps < 2:
                return now_s
        per_group: list[tuple[int, int]] = []
        for g in self.groups:
            n = len(g.running)
            if n:
                per_group.append((n, sum(seq.prompt_tokens + seq.generated for seq in g.running)))
        decodes = len(running)
        step_breakdown = self.dep.step_breakdown
        gaps = self.scheduled_gaps
        for j in range(steps):
            loads = [GroupLoad(n, float(ctx + j * n), 0.0, float(ctx + j * n)) for n, ctx in per_group]
            step_s = step_breakdown(loads).total_s
            now_s += step_s
            if j == 0 and gaps is not None:  # a sequence may have waited since before the last step
                gaps.extend(now_s - seq.last_token_s for _, seq in running)
            else:
                on_step(step_s, decodes)
        self.steps_fast_forwarded += steps
        for g, seq in running:
            seq.generated += steps
            seq.last_token_s = now_s
            if self.recompute:
                need = -(-(seq.prompt_tokens + seq.generated) // bs) - seq.private_blocks - len(seq.cache_refs)
                if need > 0:
                    seq.private_blocks += need
                    g.private_used += need
            self.on_tokens(seq, steps)
        return now_s

    def _steps_with_free_blocks(self, steps: int) -> int:
        """The largest k ≤ ``steps`` for which every group's growth over k decodes fits its free blocks."""
        bs = self.block_size

        def fits(k: int) -> bool:
            for g in self.groups:
                need = 0
                for seq in g.running:
                    need += max(
                        0, -(-(seq.prompt_tokens + seq.generated + k) // bs) - seq.private_blocks - len(seq.cache_refs)
                    )
                if need > g.free_blocks:
                    return False
            return True

        if fits(steps):
            return steps
        low, high = 0, steps  # fits(low), not fits(high)
        while high - low > 1:
            mid = (low + high) // 2
            if fits(mid):
                low = mid
            else:
                high = mid
        return low

    def complete(self, now_s: float) -> None:
        """The planned step ended at ``now_s``: emit decode tokens, then first tokens; free finished."""
        plan, self._plan = self._plan, []
        speculator = self.speculator
        for g, decodes, chunks in plan:
            for seq in decodes:
                if seq.group is g:  # not preempted or cancelled earlier in this pass
                    if speculator is None:
                        self._emit(seq, g, now_s)
                    else:  # the bonus token and the accepted drafts, never past max_tokens
                        self._emit(seq, g, now_s, min(1 + speculator.accept(), seq.max_tokens - seq.generated))
            for seq, c in chunks:
                if seq.group is not g:
                    continue
                seq.computed += c
                if self.prefix_cache:
                    self._register_blocks(seq, g)
                if seq.computed >= seq.target:
                    self._prefilling -= 1
                    self._emit(seq, g, now_s)

    # ------------------------------------------------------------------ internals

    def _emit(self, seq: SimSequence, g: _Group, now_s: float, n: int = 1) -> None:
        seq.generated += n
        if seq.first_token_s is None:
            seq.first_token_s = now_s
        elif self.scheduled_gaps is not None:
            if n == 1:
                self.scheduled_gaps.append(now_s - seq.last_token_s)
            else:  # several tokens of one verify step share its gap
                self.scheduled_gaps.extend([(now_s - seq.last_token_s) / n] * n)
        seq.last_token_s = now_s
        self.on_tokens(seq, n)
        if seq.generated >= seq.max_tokens:
            seq.finished = True
            self._release(seq)
            if self.on_finish is not None:
                self.on_finish(seq)
        elif self.recompute:
            self._grow(seq, g)

    def _grow(self, seq: SimSequence, g: _Group) -> None:
        """Hold blocks for the next decode's context; evict cache-only blocks, then preempt the newest."""
        need = -(-(seq.prompt_tokens + seq.generated) // self.block_size)
        while seq.private_blocks + len(seq.cache_refs) < need:
            if g.free_blocks > 0 or g.evict_one():
                g.private_used += 1
                seq.private_blocks += 1
                continue
            victim = next(reversed(g.running))
            self._preempt(victim)
            if victim is seq:
                return

    def _preempt(self, seq: SimSequence) -> None:
        self._release(seq)
        seq.target = seq.prompt_tokens + seq.generated
        seq.computed = 0
        seq.state.preemptions += 1
        self.preemptions_total += 1
        self.queue.appendleft(seq)  # newest preempted first, so older victims end up ahead

    def _release(self, seq: SimSequence) -> None:
        g = seq.group
        assert g is not None
        del g.running[seq]
        if seq.computed < seq.target:
            self._prefilling -= 1
        g.private_used -= seq.private_blocks
        seq.private_blocks = 0
        cache, lru = g.cache, g.lru
        for h in seq.cache_refs:  # blocks stay resident, evictable once unreferenced
            refs_h = cache[h] - 1
            cache[h] = refs_h
            if refs_h == 0:
                lru[h] = None
        seq.cache_refs = []
        seq.group = None

    def _register_blocks(self, seq: SimSequence, g: _Group) -> None:
        """Publish the prompt's fully computed blocks to the group's cache (dedup against equal ones)."""
        refs = seq.cache_refs
        start = len(refs)
        full = min(seq.computed // PREFIX_BLOCK_TOKENS, seq.hashable_blocks)
        if full <= start:
            return
        cache, lru = g.cache, g.lru
        for h in seq.hashes[start:full]:
            refs_h = cache.get(h)
            if refs_h is None:
                cache[h] = 1
            else:  # someone computed it first: share theirs, free ours
                if refs_h == 0:
                    del lru[h]
                cache[h] = refs_h + 1
            refs.append(h)
        moved = full - start
        g.private_used -= moved
        seq.private_blocks -= moved

    def _choose(self, seq: SimSequence) -> tuple[int, _Group, int, int] | None:
        """The §4.2 group for ``seq``: (room left, group, matched prefix blocks, blocks), or None."""
        max_seqs = self.dep.max_seqs_per_group
        blocks = -(-(seq.target if self.recompute else seq.prompt_tokens + seq.max_tokens) // self.block_size)
        best: tuple[int, _Group, int, int] | None = None
        held: tuple[int, int, _Group, int] | None = None  # (matched, room left, group, blocks): cache affinity
        limit = min(seq.hashable_blocks, (seq.target - 1) // PREFIX_BLOCK_TOKENS) if seq.hashable_blocks else 0
        least_running = min(len(g.running) for g in self.groups)
        matches = []
        for g in self.groups:
            matched = evictable = 0
            if limit:
                matched, evictable = g.leading_hits(seq.hashes, limit)
            matches.append(matched)
            if len(g.running) >= max_seqs:
                continue
            needed = blocks - matched
            room = g.available_blocks - evictable
            watermark = 1 if self.recompute and needed < g.total_blocks else 0
            if room < needed + watermark:
                continue
            if best is None or room - needed > best[0]:
                best = (room - needed, g, matched, blocks)
            if len(g.running) - least_running <= AFFINITY_IMBALANCE_SEQS and (
                held is None or (matched, room - needed) > held[:2]
            ):
                held = (matched, room - needed, g, blocks)
        if held is None or len(self.groups) < 2:
            return best
        runner_up = sorted(matches)[-2]
        if 4 * (held[0] - runner_up) >= limit > 0:  # this group alone holds a quarter of the prompt or more
            return held[1], held[2], held[0], held[3]
        return best

    def _admit(self) -> None:
        while self.queue:
            best = self._choose(self.queue[0])
            if best is None:
                return  # FCFS: no skipping
            self._place(self.queue.popleft(), best[1], best[2], best[3])

    def _place(self, seq: SimSequence, g: _Group, matched: int, blocks: int) -> None:
        for h in seq.hashes[:matched]:
            g.ref(h)
        seq.cache_refs = list(seq.hashes[:matched])
        need_private = blocks - matched
        while g.free_blocks < need_private and g.evict_one():
            pass
        g.private_used += need_private
        seq.private_blocks = need_private
        seq.computed = matched * PREFIX_BLOCK_TOKENS
        seq.group = g
        g.running[seq] = None
        self._prefilling += 1
        if seq.admissions == 0:
            seq.state.cached_tokens = seq.computed
            self.cached_prompt_tokens_total += seq.computed
        seq.admissions += 1

    # ------------------------------------------------------------------ gauges

    @property
    def running(self) -> int:
        return sum(len(g.running) for g in self.groups)

    @property
    def waiting(self) -> int:
        return len(self.queue)

    def kv_usage_ratio(self) -> float:
        """Blocks held by sequences (cache-only blocks count as free, as in vLLM) over all groups."""
        total = sum(g.total_blocks for g in self.groups)
        used = sum(g.total_blocks - g.available_blocks for g in self.groups)
        return used / total if total else 0.0
