"""``attnload check``: preflight each model and print the fix for what fails (the seed's troubleshooting, as code).

Per model it shows the resolved chat URL (and the ``.../v1`` base handed to the openai
SDK), whether the key's env var is set (its length and last 4 characters only), which
proxy variables apply and whether the proxy answers, then sends one tiny streaming
request through the openai SDK (what users' scripts do) and one through attnload's own
load-path client (what ``attnload run`` will do). The verdict is OK with TTFT and
tokens, or a docs/design.md error class with a fix that names the setting to change.

It runs without gevent's monkey-patching, so the SDK's cost and its ``platform``
probing (docs/design.md, pitfalls) do not matter here. Exit status: 0 when every model
passes, 1 when any fails, 2 for a bad config or flags.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from attnload.apis import DEFAULT_API, api_of
from attnload.client.budget import MAX_BODY_BYTES
from attnload.client.classify import TOOL_CHOICE_FIX, printable
from attnload.client.proxy import proxy_for
from attnload.client.transport import Timeouts
from attnload.commands.check_budget import bounding_hook, within
from attnload.commands.check_probes import (
    Access,
    Probe,
    ProxyInfo,
    raw_probe,
    sdk_client,
    sdk_probe,
    slow_first_note,
)
from attnload.config.limits import MAX_OUTPUT_TOKENS
from attnload.config.load import load_config
from attnload.config.model import ModelTarget, TestConfig
from attnload.config.urls import sdk_base_url, split_query
from attnload.errors import ErrorClass, RequestFailed, UsageError, redact, register_secret
from attnload.workload.agent import tool_definitions

PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")
LEFTOVER_CREDENTIALS = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
)
"""Credentials other tools read first (the seed's "OAuth leftovers"); only their names are ever shown."""
PROXY_PROBE_S = 2.0
MODELS_TIMEOUT_S = 10.0
"""The whole ``GET /models`` listing that a not_found fix quotes (bytes capped too: check_budget.py)."""
CONFIRM_TIMEOUT_S = 2.0
"""The load-path probe's total timeout after the SDK probe already timed out (it only confirms)."""
SCHEMA = "attnload.check/v1"

_proxy_bypass_environment: Callable[[str], bool] = vars(urllib.request)["proxy_bypass_environment"]
"""NO_PROXY matching as urllib and httpx apply it (public in urllib.request, absent from typeshed's stub)."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", required=True, help="benchmark_config.json or taotoken_config.toml")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="KEY",
        help="check only this model key (repeatable; default: every model)",
    )
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens asked of each tiny request")
    parser.add_argument("--prompt", default="Reply with one short sentence.", help="the tiny request's prompt")
    parser.add_argument("--json", action="store_true", help="machine-readable output on stdout")


# ---------------------------------------------------------------------------- report model


@dataclass
class KeyInfo:
    env: str | None
    set: bool = False
    length: int = 0
    last4: str = ""
    problems: list[str] = field(default_factory=list)


@dataclass
class ModelCheck:
    key: str
    model: str
    attention: str
    url: str
    sdk_base_url: str
    url_note: str
    api_key: KeyInfo
    proxy: ProxyInfo
    sdk: Probe | None = None
    raw: Probe | None = None
    verdict: str = "ok"
    detail: str = ""
    fix: str = ""
    notes: list[str] = field(default_factory=list)
    api: str = "chat"
    """The API probed (the model key ``api``): chat through the openai SDK and the load path, others through the
    load path alone (what ``attnload run`` sends)."""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


# ---------------------------------------------------------------------------- entry point


def run(args: argparse.Namespace) -> int:
    if not 0 < args.max_tokens <= MAX_OUTPUT_TOKENS:
        raise UsageError(f"--max-tokens {args.max_tokens} must be from 1 to {MAX_OUTPUT_TOKENS:,}")
    for name in ("httpx2", "httpx", "openai"):  # their per-request INFO lines would bury the verdicts
        logging.getLogger(name).setLevel(logging.WARNING)
    config = load_config(args.config)
    targets = [config.model(key) for key in args.model] if args.model else list(config.models)
    checks = [check_model(config, target, args.max_tokens, args.prompt) for target in targets]
    if args.json:
        print(
            json.dumps(
                _redact_tree(
                    {
                        "schema": SCHEMA,
                        "config": str(args.config),
                        "ok": all(c.ok for c in checks),
                        "models": [_as_json(c) for c in checks],
                    }
                ),
                indent=2,
            )
        )
    else:
        print(redact(render(str(args.config), checks)))
    return 0 if all(c.ok for c in checks) else 1


def check_model(config: TestConfig, target: ModelTarget, max_tokens: int, prompt: str) -> ModelCheck:
    """Everything ``attnload check`` knows about one model, with the verdict and fix filled in."""
    api = api_of(target.api)
    sdk_base = sdk_base_url(target.url, target.base_url, target.api, target.id)
    access = Access(key_header=target.auth_header, query=split_query(target.url)[1])  # the SDK's default_query
    key_info, key = _key_info(target)
    check = ModelCheck(
        key=target.key,
        model=target.id,
        attention=target.attention,
        url=target.url,
        sdk_base_url=sdk_base,
        url_note=target.url_note,
        api_key=key_info,
        proxy=_proxy_info(target.url),
        api=target.api,
    )
    if "ends in /v1" in target.url_note:
        check.notes.append(
            f"base_url ends in /v1: used {target.url} (not /v1/v1); you may drop the trailing /v1 from base_url"
        )
    if key_info.env and not key_info.set:
        _decide(
            check, RequestFailed(ErrorClass.AUTH, f"environment variable {key_info.env} is not set"), config, max_tokens
        )
        return check
    timeouts = Timeouts(
        connect_s=config.request.connect_timeout_s,
        ttft_s=config.request.ttft_timeout_s,
        idle_s=config.request.idle_timeout_s,
        total_s=config.request.total_timeout_s,
    )
    messages = [{"role": "user", "content": prompt}]
    if api is not DEFAULT_API:
        return _check_api(check, config, target, key, messages, max_tokens, timeouts)
    started = time.perf_counter()
    deadline = started + timeouts.total_s
    check.sdk = within(
        deadline,
        timeouts.total_s,
        lambda: sdk_probe(sdk_base, key, target.id, messages, max_tokens, timeouts, check.proxy, access),
        Probe.failed,
    )
    # The SDK ran out of time: confirm with the load path quickly, so check returns within total + ~5 s.
    confirm = (
        check.sdk.error == ErrorClass.TIMEOUT.label
        and "total timeout" in check.sdk.detail
        and timeouts.total_s > CONFIRM_TIMEOUT_S
    )
    raw_timeouts = replace(timeouts, total_s=CONFIRM_TIMEOUT_S) if confirm else timeouts
    raw_started = time.perf_counter()
    check.raw = raw_probe(target.url, key, target.id, messages, max_tokens, raw_timeouts, access=access)
    if note := slow_first_note(raw_started - started, time.perf_counter() - raw_started):
        check.notes.append(note)
    failing = next((p for p in (check.sdk, check.raw) if not p.ok), None)
    if failing is check.sdk and check.raw.error == check.sdk.error and not confirm:
        failing = check.raw  # same class: the load path's detail is the more specific one
    if check.raw.error == ErrorClass.PROXY_AUTH.label:
        failing = check.raw  # the load path sends the proxy's login itself: its verdict is the one `run` meets
    if failing is None:
        failing = _agent_probe(config, target, key, messages, max_tokens, timeouts)
    if failing is None:
        check.verdict = "ok"
        return check
    if check.sdk.ok and not check.raw.ok:
        check.notes.append(
            "the openai SDK succeeded but attnload's load-path client failed: `attnload run` would fail the same way"
        )
    _decide(
        check, RequestFailed(ErrorClass.from_label(failing.error or "bad_response"), failing.detail), config, max_tokens
    )
    return check


def _check_api(
    check: ModelCheck,
    config: TestConfig,
    target: ModelTarget,
    key: str | None,
    messages: list[dict[str, str]],
    max_tokens: int,
    timeouts: Timeouts,
) -> ModelCheck:
    """An API other than chat: the load path's request alone, through its API object (the openai SDK speaks chat).

    A server that does not speak the API answers 404/405 or a body that is not its stream; if chat
    completions then work at the same base, the fix is the ``api`` key itself, said in one line.
    """
    access = Access(key_header=target.auth_header)
    check.raw = raw_probe(target.url, key, target.id, messages, max_tokens, timeouts, target.api, access=access)
    if check.raw.ok:
        check.verdict = "ok"
        return check
    failure = RequestFailed(ErrorClass.from_label(check.raw.error or "bad_response"), check.raw.detail)
    _decide(check, failure, config, max_tokens)
    if failure.kind in (ErrorClass.NOT_FOUND, ErrorClass.BAD_REQUEST, ErrorClass.BAD_RESPONSE):
        chat_url = check.sdk_base_url + "/chat/completions" + split_query(target.url)[1]
        quick = replace(timeouts, total_s=CONFIRM_TIMEOUT_S)
        chat = raw_probe(chat_url, key, target.id, messages, max_tokens, quick, access=access)
        if chat.ok:
            check.fix = (
                f"the server does not speak the {target.api} API at {target.url} but answers chat completions "
                f'at {chat_url}: set api = "{DEFAULT_API.name}" for model {target.key} (or point base_url at a gateway '
                f"that serves {api_of(target.api).path(target.id)})"
            )
    return check


def _agent_probe(
    config: TestConfig,
    target: ModelTarget,
    key: str | None,
    messages: list[dict[str, str]],
    max_tokens: int,
    timeouts: Timeouts,
) -> Probe | None:
    """An agent profile sends ``tools`` on every step: one request with them (and its ``tool_choice``), so a
    server without tool-call parsing is found here; None when it answers or no profile is an agent."""
    agent = next((p.agent for p in config.profiles if p.agent is not None), None)
    if agent is None:
        return None
    tools = tool_definitions(agent.tools.model_copy(update={"count": max(agent.tools.count, 1)}))
    probe = raw_probe(
        target.url,
        key,
        target.id,
        messages,
        max_tokens,
        timeouts,
        target.api,
        tools,
        agent.tool_choice,
        Access(key_header=target.auth_header),
    )
    return None if probe.ok else probe


# ---------------------------------------------------------------------------- environment


def _key_info(target: ModelTarget) -> tuple[KeyInfo, str | None]:
    """Length and last 4 characters only; the value is registered for redaction and never shown."""
    if target.api_key_env is None:
        return KeyInfo(env=None), None
    value = os.environ.get(target.api_key_env)
    if not value:
        return KeyInfo(env=target.api_key_env), None
    register_secret(value)
    info = KeyInfo(env=target.api_key_env, set=True, length=len(value), last4=value[-4:] if len(value) >= 12 else "")
    if value != value.strip():
        info.problems.append("has leading or trailing whitespace")
    if value.lower().startswith("bearer "):
        info.problems.append("starts with 'Bearer ' (the client adds it)")
    if value[:1] in "\"'" or value[-1:] in "\"'":
        info.problems.append("is wrapped in quotes")
    return info, value


def _proxy_info(url: str) -> ProxyInfo:
    variables = {name: redact(os.environ[n]) for name in PROXY_VARS for n in (name, name.lower()) if os.environ.get(n)}
    parts = urlsplit(url)
    info = ProxyInfo(variables=variables)
    host = parts.hostname or ""
    load_path = proxy_for(parts.scheme, host)
    info.load_path_proxy = f"{load_path[0]}:{load_path[1]}" if load_path else None
    # httpx (the SDK) uses a proxy for loopback hosts too, unless NO_PROXY names them.
    if os.environ.get("NO_PROXY", os.environ.get("no_proxy", "")).strip() == "*" or _proxy_bypass_environment(host):
        return info
    for name in (f"{parts.scheme}_proxy", "all_proxy"):
        for var in (name, name.upper()):
            if os.environ.get(var):
                info.sdk_proxy, info.sdk_proxy_var = redact(os.environ[var]), var
                info.sdk_proxy_reachable = _reachable(os.environ[var])
                return info
    return info


def _reachable(proxy_url: str) -> bool:
    parts = urlsplit(proxy_url if "://" in proxy_url else "http://" + proxy_url)
    try:
        socket.create_connection((parts.hostname or "", parts.port or 8080), timeout=PROXY_PROBE_S).close()
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------- verdicts and fixes


def _decide(check: ModelCheck, failure: RequestFailed, config: TestConfig, max_tokens: int) -> None:
    check.verdict = failure.kind.label
    check.detail = failure.detail
    check.fix = fix_for(check, failure, config, max_tokens)


def fix_for(check: ModelCheck, failure: RequestFailed, config: TestConfig, max_tokens: int) -> str:
    """The exact change to make, naming the setting (the seed's section 5 advice)."""
    kind = failure.kind
    if kind is ErrorClass.AUTH:
        return _auth_fix(check.api_key)
    if kind is ErrorClass.NOT_FOUND:
        return _not_found_fix(check)
    if kind is ErrorClass.PROXY:
        proxy = check.proxy
        names = " ".join(n for n in proxy.variables if n != "NO_PROXY") or proxy.sdk_proxy_var or "HTTPS_PROXY"
        state = "unreachable" if proxy.sdk_proxy_reachable is False else "failing"
        host = urlsplit(check.url).hostname
        return (
            f"unset {names} (the proxy {proxy.sdk_proxy or ''} is {state}) and check again, or add {host} to "
            f"NO_PROXY; the endpoint needs no proxy. IDE plugins may use their own proxy settings too"
        )
    if kind is ErrorClass.TIMEOUT:
        request = config.request
        which, now = "timeout", request.total_timeout_s  # the seed's `timeout` is total_timeout_s
        if request.ttft_timeout_s and ("ttft" in failure.detail or "first token" in failure.detail):
            which, now = "ttft_timeout_s", request.ttft_timeout_s
        elif "stalled" in failure.detail:
            which, now = "idle_timeout_s", request.idle_timeout_s
        return (
            f"raise [request] {which} (now {now:g} s; e.g. 120; the seed's `timeout` sets total_timeout_s, "
            f"ttft_timeout_s bounds the first token, idle_timeout_s the gap between chunks) or lower max_tokens"
        )
    if kind is ErrorClass.TRUNCATED:
        if "stream ended without" in failure.detail:
            end = failure.detail.rpartition("without ")[2]  # [DONE], or the API's end event
            return (
                f"the stream ended without {end}: the server or a proxy cut it; check for a gateway timeout "
                "in front of the server, then raise max_tokens if replies are cut short"
            )
        return (
            f"raise max_tokens (this check asked for {max_tokens}; the config has {config.request.max_tokens}; "
            f"try 512): the model stopped on length before max_tokens"
        )
    if kind is ErrorClass.QUOTA:
        return (
            "the account is out of quota or balance (insufficient quota): top it up or check usage in the "
            "provider's console"
        )
    if kind is ErrorClass.BAD_RESPONSE:
        return (
            f"the reply is not an OpenAI chat completion (reading choices failed): set base_url to the API "
            f"root (e.g. https://taotoken.net/api; used {check.url}) and check that the model id "
            f"{check.model!r} is listed; the raw reply was: {failure.detail}"
        )
    if kind is ErrorClass.CONNECTION:
        parts = urlsplit(check.url)
        where = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
        if any(w in failure.detail.lower() for w in ("refused", "connecterror", "unreachable", "no route")):
            return (
                f"nothing accepted the connection at {where}: check base_url (scheme, host, port) and that "
                f"the server is up"
            )
        return (
            f"the connection to {where} was reset mid-request: the server, a load balancer or a proxy dropped "
            f"it; check the server's logs, then try again with a smaller max_tokens"
        )
    if kind is ErrorClass.RATE_LIMITED:
        return "the provider rate-limited even one request: wait and retry, then lower --users or --shape rate"
    if kind is ErrorClass.BAD_REQUEST and TOOL_CHOICE_FIX in failure.detail:
        return TOOL_CHOICE_FIX
    return kind.value


def _auth_fix(key: KeyInfo) -> str:
    """Which key to set or fix, and which other credentials may be sent instead."""
    if key.env is None:
        return (
            "the endpoint wants a key: add api_key_env to the config and export the key in that "
            "variable (keys are never read from files)"
        )
    if not key.set:
        return f"export {key.env}=<your key> (keys are never read from files), then check again"
    ends = f", ends …{key.last4}" if key.last4 else ""
    text = (
        f"check the key in ${key.env} ({key.length} chars{ends}): copy it complete with no spaces "
        f"(`echo ${key.env}` must print it; the client sends the header as Bearer, one space, the key); "
        f"if it was deleted or expired, create a new one"
    )
    if key.problems:
        text = f"the key in ${key.env} {' and '.join(key.problems)}: fix it; " + text
    leftovers = [name for name in LEFTOVER_CREDENTIALS if os.environ.get(name) and name != key.env]
    if leftovers:
        text += (
            f". Other credentials are set ({', '.join(leftovers)}): attnload uses only ${key.env}, but "
            f"tools that read those first (Claude Code with old OAuth tokens in ~/.claude/) keep sending "
            f"stale ones: unset them or clear ~/.claude/ caches and reconfigure"
        )
    return text


def _not_found_fix(check: ModelCheck) -> str:
    """The path or the model id, told apart by the provider's model list where it answers."""
    if "/v1/v1" in check.url:
        root = check.url.split("/v1/v1")[0]
        return f"drop the extra /v1 from base_url: it resolved to {check.url}; use {root} (the API root)"
    models = _list_models(check.sdk_base_url, _key_value(check))
    if models is None:
        return (
            f"the path does not exist: set base_url to the API root (e.g. https://taotoken.net/api, "
            f"no trailing /v1/chat/completions); used {check.url}. If it is right, check that the model id "
            f"{check.model!r} is in the provider's model list"
        )
    if check.model not in models:
        shown = ", ".join(models[:8]) + (" …" if len(models) > 8 else "")
        return (
            f"model id {check.model!r} is not in the provider's model list ({shown}): fix its spelling "
            f"(ids are lowercase with hyphens, e.g. deepseek-chat, llama-3-70b)"
        )
    return f"the provider lists {check.model!r} but refused it: check the model id and base_url ({check.url})"


def _key_value(check: ModelCheck) -> str | None:
    return os.environ.get(check.api_key.env) if check.api_key.env else None


def _list_models(base_url: str, key: str | None) -> list[str] | None:
    """The provider's model ids (``GET {base}/models``), or None when that path does not answer."""
    import openai

    hook = bounding_hook(time.perf_counter() + MODELS_TIMEOUT_S, MAX_BODY_BYTES, MODELS_TIMEOUT_S)
    client = sdk_client(base_url, key, MODELS_TIMEOUT_S, hook)
    try:
        return sorted(str(m.id) for m in client.models.list())
    except (openai.OpenAIError, ValueError, TypeError, AttributeError, RequestFailed):
        return None
    finally:
        client.close()


# ---------------------------------------------------------------------------- output


def _as_json(check: ModelCheck) -> dict[str, Any]:
    data = asdict(check)
    data["ok"] = check.ok
    return data


def _redact_tree(value: Any) -> Any:
    """Redact every string inside a JSON value (redacting the dumped text could break its syntax)."""
    if isinstance(value, str):
        return redact(printable(value))
    if isinstance(value, dict):
        return {k: _redact_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_tree(v) for v in value]
    return value


def render(config_path: str, checks: list[ModelCheck]) -> str:
    lines = [f"attnload check: {config_path} ({len(checks)} model{'s' if len(checks) != 1 else ''})"]
    proxy_vars = checks[0].proxy.variables if checks else {}
    lines.append("proxy variables: " + (", ".join(f"{k}={v}" for k, v in proxy_vars.items()) or "none set"))
    for check in checks:
        lines += [
            "",
            f"[{check.key}] {check.model} ({check.attention})",
            f"  api:     {check.api} (probed: POST {urlsplit(check.url).path})",
            f"  url:     {check.url}  ({check.url_note})",
            f"  sdk:     base_url {check.sdk_base_url}"
            + (
                "" if check.api == DEFAULT_API.name else f" (the openai SDK probe speaks chat: not run for {check.api})"
            ),
        ]
        key = check.api_key
        if key.env is None:
            lines.append("  key:     no api_key_env (requests carry no Authorization header)")
        elif not key.set:
            lines.append(f"  key:     {key.env} is NOT set")
        else:
            ends = f", ends …{key.last4}" if key.last4 else ""
            problems = f" ({'; '.join(key.problems)})" if key.problems else ""
            lines.append(f"  key:     {key.env} set, {key.length} chars{ends}{problems}")
        proxy = check.proxy
        if proxy.sdk_proxy:
            reach = "reachable" if proxy.sdk_proxy_reachable else "UNREACHABLE"
            lines.append(
                f"  proxy:   {proxy.sdk_proxy_var}={proxy.sdk_proxy} ({reach}) applies to the openai SDK; "
                f"load path: {proxy.load_path_proxy or 'direct'}"
            )
        else:
            lines.append(f"  proxy:   none applies (load path: {proxy.load_path_proxy or 'direct'})")
        for name, probe in (("openai SDK", check.sdk), ("raw", check.raw)):
            if probe is not None:
                lines.append(f"  {name + ':':11s}" + _probe_text(probe))
        for note in check.notes:
            lines.append(f"  note:    {note}")
        if check.ok:
            probe = check.sdk or check.raw
            ttft = f"TTFT {probe.ttft_s:.3f} s, " if probe and probe.ttft_s is not None else ""
            lines.append(f"  verdict: OK ({ttft}{probe.tokens if probe else 0} tokens)")
        else:
            lines.append(f"  verdict: FAILED {check.verdict}: {check.detail}")
            lines.append(f"  fix:     {check.fix}")
    failed = [c.key for c in checks if not c.ok]
    lines += [
        "",
        f"{len(checks) - len(failed)} of {len(checks)} models passed"
        + (f"; failed: {', '.join(failed)}" if failed else ""),
    ]
    return "\n".join(printable(line) for line in lines)  # server text must not drive the terminal


def _probe_text(probe: Probe) -> str:
    if probe.ok:
        ttft = f"TTFT {probe.ttft_s:.3f} s, " if probe.ttft_s is not None else ""
        return f"ok ({ttft}{probe.tokens} tokens{', finish ' + probe.finish_reason if probe.finish_reason else ''})"
    return f"{probe.error}: {probe.detail}"
