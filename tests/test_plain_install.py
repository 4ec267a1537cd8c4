"""``pip install attnload`` without extras, as a user gets it: no Kubernetes client, and every command
but ``cluster`` works; ``cluster`` says which extra to install, in one line.

A fresh virtualenv gets this tree (its files as git sees them) installed at constraints.txt's versions
from the package index (pip's cache makes a second run quick), then drives the simulator through it.
Minutes of installing: a scenario test (``make test-scenarios``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, Processes, free_port, latest_results, wait_http, write_config

pytestmark = [pytest.mark.scenario, pytest.mark.slow]


def _copy_tree(into: Path) -> None:
    """The tree's tracked and new (not ignored) files: no .venv, build output or results come along."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    names = [n for n in listed.decode().split("\0") if n and (ROOT / n).is_file()]
    into.mkdir()
    subprocess.run(
        ["tar", "-cf", "-", "--null", "-T", "-"],
        cwd=ROOT,
        input="\0".join(names).encode(),
        check=True,
        stdout=open(into / "tree.tar", "wb"),
    )  # noqa: SIM115 - closed when tar ends
    subprocess.run(["tar", "-xf", "tree.tar"], cwd=into, check=True)


def test_a_plain_install_has_no_kubernetes_and_cluster_names_the_extra(tmp_path: Path, processes: Processes) -> None:
    source, venv = tmp_path / "src", tmp_path / "venv"
    _copy_tree(source)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "-c", str(source / "constraints.txt"), str(source)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    python = str(venv / "bin" / "python")
    probe = "import importlib.util as u; print(u.find_spec('kubernetes') is None, u.find_spec('attnload') is not None)"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.split() == ["True", "True"]

    cluster = subprocess.run(
        [str(venv / "bin" / "attnload"), "cluster", "status"], capture_output=True, text=True, timeout=60
    )
    assert cluster.returncode == 2, cluster.stderr
    assert cluster.stderr.strip().splitlines() == [
        "attnload cluster: error: the Kubernetes client is not installed: pip install 'attnload[cluster]'"
    ]
    assert (
        "--extras"
        in subprocess.run(
            [str(venv / "bin" / "attnload"), "cluster", "up", "--help"], capture_output=True, text=True
        ).stdout
    )

    port = free_port()
    sim = processes.start(
        [python, "-m", "attnload", "sim", "--host", "127.0.0.1", "--port", str(port), "--models", "llama-3-70b"],
        name="sim",
        cwd=tmp_path,
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", sim)
    config = write_config(tmp_path, url, {"gqa_model": ("llama-3-70b", "GQA")})
    results = tmp_path / "results"
    run = processes.start(
        [python, "-m", "attnload", "run", "-c", str(config), "--users", "2", "--duration", "3s"]
        + ["--results", str(results), "--metrics-port", str(free_port())],
        name="run",
        cwd=tmp_path,
    )
    assert run.wait(timeout=120) == 0, processes.log_of(run)
    summary = latest_results(results)["models"][0]
    assert summary["requests"]["ok"] > 0 and summary["requests"]["failed"] == 0, json.dumps(summary["requests"])
