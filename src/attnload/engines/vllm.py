"""Start and stop real vLLM (CPU build) servers from their own virtualenv, as process groups.

Why a separate environment: vLLM's CPU build is ~3.4 GB with its own torch pin; it stays out
of attnload's ``.venv``, its ``[test]`` extras and its image (``make vllm-env``, docs/vllm.md).
This module never imports vLLM: it runs ``ENV/bin/python -m vllm.entrypoints.openai.api_server``
(the ``vllm`` console script of the CPU wheel asks for a distribution named ``vllm`` and fails).

Facts the commands encode (each checked on this build, docs/vllm.md):
- every CPU server pins its OpenMP workers to core 0 unless ``VLLM_CPU_OMP_THREADS_BIND`` says
  otherwise, so each server gets its own core (two on one core stall each other);
- ``--enforce-eager`` starts in about a minute on 2 cores (no compile step);
- the KV budget is ``--kv-cache-memory-bytes`` (honoured by the CPU worker, which then skips its warm-up
  and memory-fraction check), equal for both models; ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB, legacy) would
  override it, so it is removed from the servers' environment;
- the CPU prefix cache's default block is 128 tokens: ``--block-size 32`` lets short conversations hit it
  (the MLA backend forces 16 and turns prefix caching off).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from attnload.apis.base import MESSAGES
from attnload.errors import UsageError

ENV_VAR = "ATTNLOAD_VLLM_ENV"
"""A virtualenv holding vLLM (default ``.venv-vllm`` in the current directory, where ``make vllm-env`` puts it)."""
DEFAULT_ENV = ".venv-vllm"
INSTALL_HINT = (
    "vLLM is not installed: run `make vllm-env` (vLLM's CPU build into its own .venv-vllm, ~3.4 GB; "
    f"docs/vllm.md) or set {ENV_VAR} to a virtualenv that has vllm"
)
START_TIMEOUT_S = 420.0
"""A cold CPU server with ``--enforce-eager`` is ready in ~1 min on an idle 2-core machine; a loaded one takes
longer."""
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback never goes through a proxy
_PR_SET_PDEATHSIG = 1


def vllm_env() -> Path | None:
    """The vLLM virtualenv, or None when there is none with vllm in it."""
    root = Path(os.environ.get(ENV_VAR) or DEFAULT_ENV).absolute()
    python = root / "bin" / "python"
    if not python.exists() or not any(root.glob("lib/python3*/site-packages/vllm/__init__.py")):
        return None
    return root


def require_vllm_env() -> Path:
    env = vllm_env()
    if env is None:
        raise UsageError(INSTALL_HINT)
    return env


@dataclass(frozen=True)
class ServerSpec:
    """One vLLM server: which model folder, its served name, port, core and KV budget."""

    model_dir: Path
    served_name: str
    port: int
    core: int
    kv_cache_bytes: int
    max_model_len: int = 2048
    block_size: int | None = None
    max_num_seqs: int = 64
    prefix_caching: bool = True
    prompt_tokens_details: bool = True
    extra_args: tuple[str, ...] = ()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def server_command(env: Path, spec: ServerSpec) -> list[str]:
    command = [
        str(env / "bin" / "python"),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(spec.model_dir),
        "--served-model-name",
        spec.served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(spec.port),
        "--load-format",
        "dummy",
        "--enforce-eager",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(spec.max_model_len),
        "--max-num-seqs",
        str(spec.max_num_seqs),
        "--kv-cache-memory-bytes",
        str(spec.kv_cache_bytes),
        "--uvicorn-log-level",
        "warning",
    ]
    if spec.block_size:
        command += ["--block-size", str(spec.block_size)]
    command.append("--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching")
    if spec.prompt_tokens_details:
        command.append("--enable-prompt-tokens-details")
    return command + list(spec.extra_args)


def server_environment(spec: ServerSpec) -> dict[str, str]:
    """The parent's environment, with this server's OpenMP threads on its own core and no hub access."""
    env = dict(os.environ)
    env.update(
        {
            "VLLM_CPU_OMP_THREADS_BIND": str(spec.core),
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
    )
    # the CPU platform lets this legacy variable (whole GiB) override --kv-cache-memory-bytes: the flag decides
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(proxy, None)  # the servers only ever talk to 127.0.0.1
    return env


def _new_group_dying_with_parent() -> None:
    """In the child: a process group of its own (stopped as one) that gets SIGTERM if we die."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the finally blocks still stop the group
        pass


@dataclass
class VllmServer:
    spec: ServerSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    started_s: float = field(default_factory=time.monotonic)

    def root_cause(self) -> str:
        """The first ``SomethingError: ...`` line of the log (vLLM prints the engine's cause before its own)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        causes = [line.strip() for line in text if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line)]
        return (causes[0] if causes else " | ".join(line.strip() for line in text[-3:]))[:400]

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM to the whole group (api server + engine core), then SIGKILL what is left."""
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(timeout=wait_s)
                # the api server may exit before its engine core: sweep the group once more
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
            break


def start_server(env: Path, spec: ServerSpec, log_dir: Path) -> VllmServer:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm-{spec.served_name}-{spec.port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(env, spec),
            env=server_environment(spec),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_new_group_dying_with_parent,
        )  # noqa: PLW1509
    return VllmServer(spec, process, log_path)


def wait_ready(servers: Sequence[VllmServer], timeout_s: float = START_TIMEOUT_S) -> None:
    """Until every server answers ``/v1/models``; a server that exits or stays silent is a UsageError."""
    pending = list(servers)
    deadline = time.monotonic() + timeout_s
    while pending:
        for server in list(pending):
            if server.process.poll() is not None:
                raise UsageError(
                    f"vLLM for {server.spec.served_name} exited with status {server.process.returncode}: "
                    f"{server.root_cause()} (log: {server.log_path})"
                )
            try:
                with _DIRECT.open(f"{server.spec.base_url}/v1/models", timeout=2.0):
                    pending.remove(server)
            except OSError:
                pass
        if pending and time.monotonic() > deadline:
            names = ", ".join(s.spec.served_name for s in pending)
            raise UsageError(f"vLLM ({names}) not ready within {timeout_s:g} s: see {pending[0].log_path}")
        if pending:
            time.sleep(1.0)


@contextmanager
def running(
    specs: Sequence[ServerSpec], log_dir: Path, timeout_s: float = START_TIMEOUT_S
) -> Iterator[list[VllmServer]]:
    """Start every server at once, wait until all are ready, and always stop them (SIGTERM/SIGINT too).

    SIGTERM is turned into ``SystemExit(143)`` while the servers run, so the ``finally`` here
    stops their process groups instead of leaving them behind.
    """
    env = require_vllm_env()
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    servers: list[VllmServer] = []
    try:
        for spec in specs:
            servers.append(start_server(env, spec, log_dir))
        wait_ready(servers, timeout_s)
        yield servers
    finally:
        for server in servers:
            server.stop()
        signal.signal(signal.SIGTERM, previous)


def scrape(base_url: str, timeout_s: float = 5.0) -> str:
    """The server's ``/metrics`` text (for tests and benchmarks that check attnload's reading of it)."""
    with _DIRECT.open(f"{base_url}/metrics", timeout=timeout_s) as response:
        return response.read().decode("utf-8")


def complete(spec: ServerSpec, text: str, max_tokens: int, timeout_s: float = 300.0) -> dict[str, object]:
    """One non-streaming chat completion (warm-ups, tests): the parsed body; HTTP errors raise."""
    body = {"model": spec.served_name, "max_tokens": max_tokens, MESSAGES: [{"role": "user", "content": text}]}
    request = urllib.request.Request(
        f"{spec.base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with _DIRECT.open(request, timeout=timeout_s) as response:
        return json.loads(response.read())
