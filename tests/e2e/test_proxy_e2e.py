"""Through a real authenticating proxy (Debian's tinyproxy with ``BasicAuth``) to the simulator in a
network namespace (loopback targets bypass proxies, so the target needs an address of its own).

The right credentials in ``HTTP_PROXY``'s userinfo carry the load through the proxy (its log shows
every request); wrong ones make every failure ``proxy_auth`` (tinyproxy answers them with a 401 of its
own, not the 407 a missing login gets), backing off like a dead endpoint instead of thousands a second,
and ``attnload check`` names the class; the password is in no output.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import Processes, attnload, free_port, latest_results, wait_http, write_config
from helpers.netns import Namespace, namespace_host

PASSWORD = "s3cr3t-Pr0xy-pw"
USER = "attn"
pytestmark = pytest.mark.skipif(shutil.which("tinyproxy") is None, reason="needs tinyproxy (apt-get install tinyproxy)")


@pytest.fixture()
def target(processes: Processes) -> Iterator[tuple[Namespace, str]]:
    """The simulator inside a namespace: ``(namespace, base URL)``."""
    with namespace_host() as ns:
        port = free_port()
        sim = processes.start(
            ns.command(attnload("sim", "--host", ns.address, "--port", str(port), "--models", "llama-3-70b")),
            name="sim",
        )
        url = f"http://{ns.address}:{port}"
        wait_http(url + "/health", sim)
        yield ns, url
        processes.stop_all()  # before the namespace goes


@pytest.fixture()
def proxy(processes: Processes, tmp_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """tinyproxy on loopback with one Basic login; logs each request to its stdout: ``(host:port, process)``."""
    port = free_port()
    conf = tmp_path / "tinyproxy.conf"
    conf.write_text(
        f"Port {port}\nListen 127.0.0.1\nAllow 127.0.0.1\nTimeout 60\nMaxClients 200\n"
        f"BasicAuth {USER} {PASSWORD}\nLogLevel Connect\nDisableViaHeader Yes\n"
    )
    process = processes.start(["tinyproxy", "-d", "-c", str(conf)], name="tinyproxy")
    _wait_listening(port, process)
    return f"127.0.0.1:{port}", process


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"tinyproxy did not listen on {port}")


def _env(proxy_at: str, password: str) -> dict[str, str]:
    url = f"http://{USER}:{password}@{proxy_at}"
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "NO_PROXY": "",
        "no_proxy": "",
        "http_proxy": url,
        "https_proxy": url,
    }


def _run(processes: Processes, tmp_path: Path, url: str, env: dict[str, str], name: str) -> tuple[int, str, dict]:
    config = write_config(tmp_path, url + "/v1", {"gqa_model": ("llama-3-70b", "GQA")})
    results = tmp_path / name
    run = processes.start(
        attnload("run", "-c", str(config), "--users", "2", "--duration", "6s", "--results", str(results))
        + [
            "--metrics-port",
            str(free_port()),
            "--server-metrics",
            "off",
            "--requests-out",
            str(results / "requests.jsonl"),
        ],
        env=env,
        name=name,
    )
    code = run.wait(timeout=120)
    text = processes.log_of(run) + "".join(p.read_text(errors="replace") for p in results.rglob("*") if p.is_file())
    return code, text, latest_results(results)["models"][0]


def test_the_right_credentials_carry_the_load_through_the_proxy(
    processes: Processes, tmp_path: Path, target: tuple[Namespace, str], proxy: tuple[str, subprocess.Popen[bytes]]
) -> None:
    _ns, url = target
    code, text, summary = _run(processes, tmp_path, url, _env(proxy[0], PASSWORD), "right")
    assert code == 0, text[-3000:]
    assert summary["requests"]["failed"] == 0 and summary["requests"]["ok"] >= 4, summary["requests"]
    posts = processes.log_of(proxy[1]).count(f"POST {url}/v1/chat/completions")
    assert posts >= summary["requests"]["ok"], processes.log_of(proxy[1])[-2000:]
    assert PASSWORD not in text


def test_wrong_credentials_are_proxy_auth_backed_off_and_never_printed(
    processes: Processes, tmp_path: Path, target: tuple[Namespace, str], proxy: tuple[str, subprocess.Popen[bytes]]
) -> None:
    _ns, url = target
    env = _env(proxy[0], "wrong-" + PASSWORD)
    code, text, summary = _run(processes, tmp_path, url, env, "wrong")
    assert code == 1
    failures = {k: n for k, n in summary["errors"].items() if k != "cancelled"}
    assert failures == {"proxy_auth": summary["requests"]["failed"]}, summary["errors"]
    assert 0 < summary["requests"]["failed"] <= 300  # backed off: without it, ~12,000 in 6 s from 2 users
    assert "proxy_auth" in text and PASSWORD not in text
    check = processes.start(attnload("check", "-c", str(tmp_path / "config.json")), env=env, name="check")
    check.wait(timeout=60)
    lines = processes.log_of(check)
    assert "proxy_auth" in lines and "USER:PASSWORD@" in lines and PASSWORD not in lines, lines


def test_connect_carries_the_login_and_a_refused_one_is_proxy_auth(
    tmp_path: Path, target: tuple[Namespace, str], proxy: tuple[str, subprocess.Popen[bytes]], processes: Processes
) -> None:
    """An https target goes through CONNECT: the login rides on it (the simulator speaks no TLS, so a right
    login ends in a TLS failure past the proxy, not in ``proxy_auth``)."""
    _ns, url = target
    https = url.replace("http://", "https://") + "/v1/chat/completions"
    probe = (
        "import sys; from attnload.client.chat import ApiClient, chat_body; from attnload.client.transport import "
        "Timeouts; c = ApiClient(sys.argv[1], None, Timeouts(connect_s=5, total_s=10)); r = c.send(chat_body("
        "'llama-3-70b', [{'role': 'user', 'content': 'hi'}], max_tokens=4, temperature=0), model_key='m', "
        "profile='p', stage=0); print(r.error, c.last_failure)"
    )
    for password, expected in ((PASSWORD, "not proxy_auth"), ("wrong", "proxy_auth")):
        result = subprocess.run(
            [sys.executable, "-c", probe, https], env={**_clean_env(), **_env(proxy[0], password)}, capture_output=True
        )
        out = result.stdout.decode() + result.stderr.decode()
        first = out.split()[0] if out.split() else ""
        assert (first == "proxy_auth") == (expected == "proxy_auth"), out
        assert password not in out
    authority = url.removeprefix("http://")
    assert processes.log_of(proxy[1]).count(f"CONNECT {authority}") >= 2


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
