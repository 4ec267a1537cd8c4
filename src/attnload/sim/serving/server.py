"""The simulator's OpenAI- and Anthropic-compatible HTTP server (aiohttp).

It owns the wire: request validation with each API's errors (sim/serving/dialects.py: chat,
completions, Responses, Messages), SSE framing, reasoning first when asked, seeded
filler text, ``usage`` (prompt tokens by the shared estimator, cached tokens from the
engine), grouping tokens into events (``tokens_per_event``), and counting the server-side
truth (``sim/serving/truth.py``: ``/stats``, ``/metrics``) that client measurements are checked
against. When tokens appear is the engine's business (``sim/api.py``).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiohttp import HttpVersion11, web

from attnload.measure.tokens import prompt_tokens, tools_tokens
from attnload.sim.api import Engine, EngineRejected, GenerationRequest, GenerationState
from attnload.sim.fixed import FixedEngine
from attnload.sim.gpu import GpuActivity, dcgm_text
from attnload.sim.serving import dialects
from attnload.sim.serving.access import Demands, demanding
from attnload.sim.serving.truth import ModelTruth, StepTimes, exposition

log = logging.getLogger(__name__)

PREFIX_BLOCK_BYTES = 64  # 16 tokens of 4 bytes (§4.5)
_WORDS = (
    "the",
    "model",
    "token",
    "cache",
    "latent",
    "query",
    "key",
    "value",
    "head",
    "layer",
    "batch",
    "memory",
    "decode",
    "prefill",
    "group",
    "tensor",
    "kernel",
    "stream",
    "vector",
    "state",
)
_N_WORDS = len(_WORDS)  # the filler repeats after this many tokens (_filler)
SIM_KEY: web.AppKey[SimServer] = web.AppKey("sim")
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
ITL_BACKLOG_MAX = 4096
WRITE_BUFFER_LIMIT = 0x10000  # bytes queued on a stream's socket before it waits for the client (as aiohttp)
_DRAIN_POLL_S = 0.005


class SimServer:
    """Routes requests to engines by model id (or alias) and keeps the truth."""

    def __init__(
        self,
        engines: Sequence[Engine],
        *,
        tokens_per_event: int = 1,
        default_output_tokens: int = 256,
        max_waiting: int | None = None,
        reasoning_ratio: float = 0.0,
    ) -> None:
        if tokens_per_event < 1:
            raise ValueError("tokens_per_event must be ≥ 1")
        if not 0.0 <= reasoning_ratio <= 1.0:
            raise ValueError("reasoning_ratio must be within [0, 1]")
        self.reasoning_ratio = reasoning_ratio
        """Share of each answer's tokens sent first, as reasoning (``--reasoning-ratio``)."""
        self.engines = list(engines)
        self.tokens_per_event = tokens_per_event
        self.default_output_tokens = default_output_tokens
        self.max_waiting = max_waiting
        self.truth = {engine.model.id: ModelTruth() for engine in self.engines}
        self._routes: dict[str, Engine] = {}
        for engine in self.engines:
            for name in (engine.model.id, engine.model.preset, *engine.model.aliases):
                self._routes.setdefault(_route_key(name), engine)
        self.steps = StepTimes(self.truth)

    def engine_for(self, model: str) -> Engine | None:
        return self._routes.get(_route_key(model))

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        # /api is the seed's gateway root: the openai SDK appends /chat/completions to it, curl adds /v1.
        prefixes = ("/v1", "/api/v1", "/api")
        for dialect in dialects.DIALECTS.values():
            for path in dialect.routes(prefixes):
                app.router.add_post(path, functools.partial(self.serve_api, dialect=dialect))
        for prefix in prefixes:
            app.router.add_get(prefix + "/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/health", self.health)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        data = [
            {
                "id": e.model.id,
                "object": "model",
                "created": 0,
                "owned_by": "attnload-sim",
                "attention": e.model.attention,
                "preset": e.model.preset,
                "simulated": True,
                "details": e.model.details,
            }
            for e in self.engines
        ]
        return web.json_response({"object": "list", "data": data})

    async def stats(self, request: web.Request) -> web.Response:
        with_prompts = request.query.get("prompts") == "1"
        models = {k: t.to_json(with_prompts) for k, t in self.truth.items()}
        for engine in self.engines:
            schedule = engine.scheduled_itl()
            if schedule is not None:  # emitted itl_s next to the schedule's: does the server keep up?
                models[engine.model.id]["itl_schedule_s"] = schedule.summary()
        return web.json_response({"models": models})

    async def metrics(self, request: web.Request) -> web.Response:
        self.steps.drain(self.engines)
        gpus = dcgm_text(
            (e.model.preset, gpu) for e in self.engines if isinstance(gpu := getattr(e, "gpu", None), GpuActivity)
        )
        return web.Response(
            body=exposition(self.engines, self.truth, self.steps) + gpus.encode(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    # ------------------------------------------------------------------ completions

    async def serve_api(self, request: web.Request, dialect: type[dialects.Dialect]) -> web.StreamResponse:
        """One request of the API ``dialect`` speaks: one timing model, its own wire."""
        received_at = time.perf_counter()
        raw = await request.read()
        _error = dialect.error
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "invalid_request_error", "invalid_json", "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "invalid_body", "request body must be a JSON object")
        model = dialect.model_of(request, body)
        if not isinstance(model, str) or not model:
            return _error(400, "invalid_request_error", "missing_model", "`model` is required")
        problem = dialect.validate(body)
        if problem:
            return _error(400, "invalid_request_error", problem[0], problem[1])
        model_name = model
        engine = self.engine_for(model_name)
        if engine is None:
            served = ", ".join(e.model.id for e in self.engines)
            return _error(
                404,
                "invalid_request_error",
                "model_not_found",
                f"The model `{model_name}` does not exist (served: {served})",
            )
        truth = self.truth[engine.model.id]
        max_tokens = dialect.max_tokens(body) or self.default_output_tokens
        messages = dialect.prompt_messages(body)
        tools = body.get("tools")
        n_prompt = prompt_tokens(messages) + tools_tokens(tools)
        if n_prompt + max_tokens > engine.model.max_model_len:
            return self._reject(
                dialect,
                truth,
                400,
                "context_length_exceeded",
                f"This model's maximum context length is {engine.model.max_model_len} tokens; "
                f"the request has {n_prompt} prompt + {max_tokens} completion tokens",
            )
        if self.max_waiting is not None and engine.snapshot().waiting >= self.max_waiting:
            return self._reject(
                dialect,
                truth,
                429,
                "rate_limit_exceeded",
                "server overloaded: too many waiting requests",
                retry_after_s=1.0,
            )
        truth.received += 1
        truth.prompt_tokens += n_prompt
        truth.prompt_digests.append(_prompt_digest(messages))
        gen = GenerationRequest(
            request_id=uuid.uuid4().hex,
            prompt_tokens=n_prompt,
            max_tokens=int(max_tokens),
            prompt_blocks=_prompt_blocks(engine.model.id, messages, tools),
            body_digest=hashlib.sha256(raw).digest(),
        )
        call = _Call(
            self,
            engine,
            truth,
            gen,
            model_name,
            received_at,
            include_usage=dialect.always_usage or bool((body.get("stream_options") or {}).get("include_usage")),
            dialect=dialect,
        )
        if dialect.streams(body):
            return await call.stream(request)
        return await call.complete()

    def _reject(
        self,
        dialect: type[dialects.Dialect],
        truth: ModelTruth,
        status: int,
        code: str,
        message: str,
        retry_after_s: float | None = None,
    ) -> web.Response:
        truth.rejected[status] = truth.rejected.get(status, 0) + 1
        kind = "rate_limit_error" if status == 429 else "invalid_request_error"
        response = dialect.error(status, kind, code, message)
        if retry_after_s is not None:
            response.headers["Retry-After"] = str(max(1, round(retry_after_s)))
        return response


class _Call:
    """One chat completion in flight: drives the engine and writes the response."""

    def __init__(
        self,
        server: SimServer,
        engine: Engine,
        truth: ModelTruth,
        gen: GenerationRequest,
        model_name: str,
        received_at: float,
        include_usage: bool,
        dialect: type[dialects.Dialect] = dialects.ChatDialect,
    ) -> None:
        self.server = server
        self.engine = engine
        self.truth = truth
        self.gen = gen
        self.state = GenerationState()
        self.model_name = model_name
        self.received_at = received_at
        self.include_usage = include_usage
        self.chat_id = dialect.id_prefix + gen.request_id[:24]
        self.created = int(time.time())
        self.dialect = dialect(self.chat_id, self.created, model_name)
        self.reasoning = round(server.reasoning_ratio * gen.max_tokens)
        """The first this many tokens are reasoning (``--reasoning-ratio``)."""
        self.emitted = 0
        self._words = _filler(gen.body_digest)
        self._chunked = True
        self._events: dict[int | tuple[int, int, int], bytes] = {}
        self._k = 1
        self._pending = 0
        self._last_at: float | None = None
        self._transport: asyncio.Transport | None = None
        self._gone = False

    def _text(self, n: int) -> str:
        words = self._words
        return "".join(words[(self.emitted + i) % len(words)] for i in range(n))

    def _record_tokens(self, n: int, last_at: float | None, now: float) -> None:
        if last_at is None:
            self.truth.ttft.record(now - self.received_at)
            if n > 1:
                self.truth.itl.record(0.0, n - 1)
        else:
            self.truth.itl.record((now - last_at) / n, n)
        self.emitted += n
        self.truth.completion_tokens += n

    def _usage(self) -> dict[str, Any]:
        usage = {
            "prompt_tokens": self.gen.prompt_tokens,
            "completion_tokens": self.emitted,
            "total_tokens": self.gen.prompt_tokens + self.emitted,
            "prompt_tokens_details": {"cached_tokens": self.state.cached_tokens},
        }
        if self.reasoning and not self.dialect.reasoning_as_text:
            usage["completion_tokens_details"] = {"reasoning_tokens": self._reasoned()}
        return usage

    def _reasoned(self) -> int:
        """Reasoning tokens sent so far."""
        return min(self.emitted, self.reasoning)

    def _content_event(self, n: int) -> bytes:
        """The next ``n`` filler tokens as SSE events (reasoning first, then answer), HTTP-framed;
        encoded once per word offset and ``n`` where the API's bytes allow (keyed by the offset
        alone for one answer token, the hot path)."""
        offset = self.emitted % _N_WORDS
        thinking = max(0, min(n, self.reasoning - self.emitted))
        key: int | tuple[int, int, int] = offset if n == 1 and not thinking else (offset, n, thinking)
        event = self._events.get(key)
        if event is None:
            dialect = self.dialect
            cacheable = dialect.stateless(thinking > 0) and (thinking in (0, n))
            text = ""
            if thinking:
                text = dialect.delta(self._text(thinking), True)
            if n > thinking:
                self.emitted += thinking  # the answer's words follow the reasoning's
                text += dialect.delta(self._text(n - thinking), False)
                self.emitted -= thinking
            data = text.encode()
            event = b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data
            if cacheable:
                self._events[key] = event
        return event

    async def _start(self, request: web.Request, response: web.StreamResponse) -> None:
        """Admitted: headers and what the API sends before any token (never counts as TTFT), through aiohttp."""
        await response.prepare(request)
        start = self.dialect.start(self.gen.prompt_tokens, self.state.cached_tokens)
        if start:
            await response.write(start.encode())
        self._transport = request.transport

    def _deliver(self, n: int) -> bool:
        """``n`` more tokens are available now: write an event when one is due (the first token
        alone, later ones in groups of up to ``tokens_per_event``) and record the truth.

        Content events, the hot path, are pre-encoded and framed here and written straight
        to the transport: the bytes aiohttp's ``StreamResponse.write`` would send, at a
        fraction of its per-call cost. False: stop, the client is gone (``_gone``) or has
        ``WRITE_BUFFER_LIMIT`` bytes unread (wait for it, then go on).
        """
        pending = self._pending + n
        last_at = self._last_at
        if last_at is not None and pending < self._k and self.emitted + pending < self.gen.max_tokens:
            self._pending = pending
            return True
        now = time.perf_counter()
        if pending == 1 and last_at is not None and self.emitted >= self.reasoning:  # the common case, inlined
            event = self._events.get(self.emitted % _N_WORDS) or self._content_event(1)
            truth = self.truth
            backlog = truth.itl_backlog
            backlog.append(now - last_at)
            if len(backlog) >= ITL_BACKLOG_MAX:
                truth.flush()
            self.emitted += 1
            truth.completion_tokens += 1
        else:
            event = self._content_event(pending)
            self._record_tokens(pending, last_at, now)
        self._last_at, self._pending = now, 0
        transport = self._transport
        if transport is None or transport.is_closing():
            self._gone = True
            return False
        transport.write(event)
        return transport.get_write_buffer_size() <= WRITE_BUFFER_LIMIT

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        # aiohttp frames a body of unknown length as chunks from HTTP/1.1 on, as-is (then closes) before.
        self._chunked = request.version >= HttpVersion11
        self._k = self.server.tokens_per_event
        generator: AsyncIterator[int] | None = None
        try:
            try:
                if isinstance(self.engine, FixedEngine):
                    await self._stream_pushed(request, response, self.engine)
                else:
                    generator = self.engine.generate(self.gen, self.state)
                    async for n in generator:
                        if n == 0:
                            await self._start(request, response)
                        elif not self._deliver(n):
                            if self._gone:
                                raise ConnectionResetError("client went away")
                            await _drain(self._transport)
            except EngineRejected as exc:
                self.truth.received -= 1
                self.truth.prompt_tokens -= self.gen.prompt_tokens
                return self.server._reject(
                    type(self.dialect), self.truth, exc.status, exc.code, str(exc), exc.retry_after_s
                )
            if not response.prepared:
                await response.prepare(request)
            tail = self.dialect.tail(
                self._usage() if self.include_usage else None,
                self.gen.prompt_tokens,
                self.state.cached_tokens,
                self.emitted,
                self._reasoned(),
            )
            await response.write_eof(tail.encode())  # one send with the last chunk
        except ConnectionResetError:  # the client went away (a stopped test): count it, free the engine's slot
            self.truth.cancelled += 1
            await _aclose(generator)
            return response
        except asyncio.CancelledError:
            self.truth.cancelled += 1
            await _aclose(generator)
            raise
        self.truth.completed += 1
        self.truth.completed_completion_tokens += self.emitted
        self.truth.cached_tokens += self.state.cached_tokens
        self.truth.reasoning_tokens += self._reasoned()
        return response

    async def _stream_pushed(self, request: web.Request, response: web.StreamResponse, engine: FixedEngine) -> None:
        """The fixed engine calls ``_deliver`` from its tick: no task wake-up per token.
        Cancelling this (server shutdown) cancels ``item.done``, which frees the engine's slot."""
        admitted_at = asyncio.get_running_loop().time()  # as generate() takes it, before the role chunk
        await self._start(request, response)
        item = engine.push(self.gen, self.state, self._deliver, admitted_at)
        while True:
            await item.done
            if item.left <= 0:
                return
            if self._gone:
                raise ConnectionResetError("client went away")
            await _drain(self._transport)
            engine.resume(item)

    async def complete(self) -> web.Response:
        last_at: float | None = None
        generator = self.engine.generate(self.gen, self.state)
        try:
            async for n in generator:
                if n:
                    now = time.perf_counter()
                    self._record_tokens(n, last_at, now)
                    last_at = now
        except EngineRejected as exc:
            self.truth.received -= 1
            self.truth.prompt_tokens -= self.gen.prompt_tokens
            return self.server._reject(
                type(self.dialect), self.truth, exc.status, exc.code, str(exc), exc.retry_after_s
            )
        except asyncio.CancelledError:
            self.truth.cancelled += 1
            await _aclose(generator)
            raise
        words = [self._words[i % len(self._words)] for i in range(self.emitted)]
        reasoned = self._reasoned()
        self.truth.completed += 1
        self.truth.completed_completion_tokens += self.emitted
        self.truth.cached_tokens += self.state.cached_tokens
        self.truth.reasoning_tokens += reasoned
        body = self.dialect.unary(
            self._usage(),
            "".join(words[:reasoned]),
            "".join(words[reasoned:]),
            self.gen.prompt_tokens,
            self.state.cached_tokens,
            reasoned,
        )
        return web.json_response(body)


async def _aclose(generator: AsyncIterator[int] | None) -> None:
    """Stop an engine's generator early, so the engine frees the request (its ``finally``)."""
    aclose = getattr(generator, "aclose", None)
    if aclose is not None:
        await aclose()


async def _drain(transport: asyncio.Transport | None) -> None:
    """Wait until a slow client has read the socket's backlog down (bounded memory per stream)."""
    while transport is not None and transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
        if transport.is_closing():
            raise ConnectionResetError("client went away")
        await asyncio.sleep(_DRAIN_POLL_S)


def _route_key(name: str) -> str:
    return name.strip().lower().rsplit("/", 1)[-1]


def _prompt_bytes(messages: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(str(m.get("role", "")).encode() + str(m.get("content", "")).encode() for m in messages)


def _agent_bytes(messages: Sequence[Mapping[str, Any]], tools: object) -> bytes:
    """An agent's prompt as a chat template (Qwen2.5's, for one) lays it out: the system message, the tool
    definitions after it, then each message with its tool calls, so a session's next step extends its
    previous prompt byte for byte and the salted system prompt keeps sessions apart from the first block."""
    tools_bytes = json.dumps(tools, separators=(",", ":"), ensure_ascii=False).encode() if tools else b""
    parts = []
    for index, m in enumerate(messages):
        content = m.get("content")
        parts.append(str(m.get("role", "")).encode() + ("" if content is None else str(content)).encode())
        calls = m.get("tool_calls")
        if calls:
            parts.append(json.dumps(calls, separators=(",", ":"), ensure_ascii=False).encode())
        if index == 0:
            parts.append(tools_bytes)
    return b"".join(parts)


def _prompt_blocks(model_id: str, messages: Sequence[Mapping[str, Any]], tools: object = None) -> tuple[int, ...]:
    """Chained hashes of the prompt's full 64-byte blocks: h_i = H(h_{i−1}, model_id, block_i) (§4.5)."""
    agent = bool(tools) or any(m.get("tool_calls") for m in messages)
    data = _agent_bytes(messages, tools) if agent else _prompt_bytes(messages)
    previous = hashlib.blake2b(model_id.encode(), digest_size=8).digest()
    blocks = []
    for start in range(0, len(data) - PREFIX_BLOCK_BYTES + 1, PREFIX_BLOCK_BYTES):
        previous = hashlib.blake2b(previous + data[start : start + PREFIX_BLOCK_BYTES], digest_size=8).digest()
        blocks.append(int.from_bytes(previous, "little"))
    return tuple(blocks)


def _prompt_digest(messages: Sequence[Mapping[str, Any]]) -> str:
    return hashlib.sha256(_prompt_bytes(messages)).hexdigest()


def _filler(seed: bytes) -> tuple[str, ...]:
    """Seeded filler: one word plus a space per token (§4.4)."""
    start = int.from_bytes(seed[:4] or b"\0", "little")
    return tuple(_WORDS[(start + i * 7) % len(_WORDS)] + " " for i in range(len(_WORDS)))


def build_app(
    engines: Sequence[Engine],
    *,
    tokens_per_event: int = 1,
    default_output_tokens: int = 256,
    max_waiting: int | None = None,
    reasoning_ratio: float = 0.0,
) -> web.Application:
    """The aiohttp application serving ``engines`` (for tests and ``serve``)."""
    server = SimServer(
        engines,
        tokens_per_event=tokens_per_event,
        default_output_tokens=default_output_tokens,
        max_waiting=max_waiting,
        reasoning_ratio=reasoning_ratio,
    )
    app = server.app()
    app[SIM_KEY] = server
    return app


def serve(
    engines: Sequence[Engine],
    *,
    host: str,
    port: int,
    tokens_per_event: int = 1,
    default_output_tokens: int = 256,
    max_waiting: int | None = None,
    reasoning_ratio: float = 0.0,
    demands: Demands | None = None,
) -> None:
    """Run the simulator until SIGINT/SIGTERM."""
    app = build_app(
        engines,
        tokens_per_event=tokens_per_event,
        default_output_tokens=default_output_tokens,
        max_waiting=max_waiting,
        reasoning_ratio=reasoning_ratio,
    )
    if demands is not None:
        app.middlewares.append(demanding(demands))  # --require-header/--require-query (access.py)
    ids = ", ".join(f"{e.model.id} ({e.model.attention})" for e in engines)
    shown = f"[{host}]" if ":" in host else host  # an IPv6 literal in a URL is bracketed
    log.info("attnload sim serving %s on http://%s:%d/v1 (simulated timings)", ids, shown, port)
    web.run_app(
        app, host=host, port=port, print=None, access_log=None, handle_signals=True, shutdown_timeout=1.0, backlog=4096
    )
