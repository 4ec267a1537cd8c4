"""Every bad input, as a real ``attnload run`` / ``attnload check`` process: one line, exit 2, nothing sent.

Each row writes a config whose ``base_url`` (where it is not the bad value itself) points
at a counting server on 127.0.0.1, runs the real command, and asserts exit status 2,
exactly one line on stderr without a traceback, that the line names the key and the
value, and that the server saw no connection at all: the input was refused before any
load (or probe) started.
"""

from __future__ import annotations

import json
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnload.config import limits
from helpers import ROOT, attnload

PASSWORD = "hunter2-s3cret"


class _Counting(socketserver.ThreadingTCPServer):
    """Counts every accepted connection and answers nothing: any contact at all is a failure."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), socketserver.BaseRequestHandler)
        self.connections = 0

    def verify_request(self, request: object, client_address: object) -> bool:
        self.connections += 1
        return False


@pytest.fixture(scope="module")
def server() -> Iterator[_Counting]:
    counting = _Counting()
    thread = threading.Thread(target=counting.serve_forever, daemon=True)
    thread.start()
    try:
        yield counting
    finally:
        counting.shutdown()
        counting.server_close()


def _json(base_url: str = "{url}", model: str = "", extra: str = "") -> str:
    """A valid benchmark_config.json with one model; ``model`` and ``extra`` splice raw JSON text in."""
    return (
        '{"base_url": '
        + json.dumps(base_url)
        + ', "models": {"a": {"id": "m", "attention_type": "GQA"'
        + model
        + "}}"
        + extra
        + "}"
    )


def _toml(base_url: str = "{url}", extra: str = "") -> str:
    return f'[provider]\nbase_url = {json.dumps(base_url)}\n[models.a]\nid = "m"\nattention = "GQA"\n{extra}'


@dataclass(frozen=True)
class Case:
    id: str
    command: str  # "run" or "check"
    text: str  # the config; "{url}" becomes the counting server's URL
    expected: tuple[str, ...]  # each must appear in the one stderr line
    suffix: str = ".json"
    flags: tuple[str, ...] = ()


DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_DICT = _json(extra=', "workload": ' + '{"x": ' * 1000 + "1" + "}" * 1000)
DEEP_TOML = _toml(extra="[workload]\nx = " + "[" * 2000 + "]" * 2000)
DEEP_TOML_TABLES = _toml(extra="[" + ".".join(["t"] * 1000) + "]\nx = 1")


def _profile(keys: str) -> str:
    """A ``workload`` with one profile ``p`` plus the raw JSON ``keys``."""
    return ', "workload": {"p": {"prompt_tokens": 100' + keys + "}}"


CASES = [
    Case("deep-json-100k", "check", DEEP_JSON, ("line 1", "nesting deeper than 32")),
    Case("deep-dict-1000", "run", DEEP_DICT, ("nesting deeper than 32",)),
    Case("deep-toml-arrays", "run", DEEP_TOML, ("line 7", "nesting deeper than 32"), ".toml"),
    Case("deep-toml-tables", "check", DEEP_TOML_TABLES, ("t.t.t", "nesting deeper than 32"), ".toml"),
    *[
        Case(f"port-99999-{c}", c, _json("http://127.0.0.1:99999/api"), ("base_url", "99999", "65535"))
        for c in ("check", "run")
    ],
    *[
        Case(f"ipv6-unclosed-{c}", c, _json("http://[::1/api"), ("base_url", "http://[::1/api", "not a valid URL"))
        for c in ("check", "run")
    ],
    *[
        Case(
            f"{name}-in-base-url-{c}",
            c,
            _json("http://127.0.0.1:{port}/a" + char + "pi"),
            ("base_url", "whitespace or a control character"),
        )
        for name, char in (("space", " "), ("cr", "\r"), ("lf", "\n"))
        for c in ("check", "run")
    ],
    Case("trailing-space-toml", "check", _toml("{url} "), ("provider.base_url", "whitespace"), ".toml"),
    *[
        Case(f"shape-{shape}", "run", _json(), (f"shape {shape!r}",), flags=("--shape", shape))
        for shape in (
            "concurrency:inf",
            "concurrency:nan",
            "rate:inf",
            "rate:nan",
            "rate:-1",
            "concurrency:0",
            "concurrency:1000000000",
            "rate:1e9",
            "sweep:1000000000",
        )
    ],
    Case("shape-in-config", "run", _json(extra=', "shape": "rate:inf"'), ("rate:inf", "'inf'")),
    Case("users-absurd", "run", _json(), ("--users", "1e+09"), flags=("--users", "1000000000")),
    Case("spawn-rate-inf", "run", _json(), ("--spawn-rate", "inf"), flags=("--spawn-rate", "inf")),
    Case("stop-timeout-nan", "run", _json(), ("--stop-timeout", "nan"), flags=("--stop-timeout", "nan")),
    *[
        Case(
            f"start-spread-{value}",
            "run",
            _json(),
            ("--start-spread", value, "auto, off"),
            flags=("--start-spread", value),
        )
        for value in ("soon", "-1", "inf", "nan", "0.01")
    ],
    Case("duration-absurd", "run", _json(), ("--duration", "99999h"), flags=("--duration", "99999h")),
    Case("weight-infinity", "run", _json(model=', "weight": Infinity'), ("models.a.weight", "Infinity")),
    Case("weight-nan-toml", "run", _toml(extra="weight = nan\n"), ("models.a.weight", "NaN"), ".toml"),
    Case("weight-1e12", "run", _json(model=', "weight": 1e12'), ("models.a.weight", "1000000000000.0", "1000000")),
    Case(
        "profile-weight-1e12",
        "run",
        _json(extra=_profile(', "weight": 1e12')),
        ("workload.p.weight", "1000000000000.0"),
    ),
    Case(
        "prompt-tokens-1e12",
        "run",
        _json(extra=', "workload": {"p": {"prompt_tokens": 1000000000000}}'),
        ("workload.p", "prompt_tokens", "1000000000000"),
    ),
    Case(
        "prompt-tokens-dist-max-1e12",
        "run",
        _json(extra=', "workload": {"p": {"prompt_tokens": {"dist": "uniform", "min": 1, "max": 1000000000000}}}'),
        ("workload.p.prompt_tokens", "1000000000000"),
    ),
    Case(
        "max-tokens-1e12",
        "check",
        _json(extra=_profile(', "max_tokens": 1000000000000')),
        ("workload.p", "max_tokens 1000000000000"),
    ),
    Case(
        "timeout-infinity-json",
        "check",
        _json(extra=', "request": {"total_timeout_s": Infinity}'),
        ("request.total_timeout_s", "Infinity"),
    ),
    Case(
        "timeout-infinity-toml",
        "check",
        _toml(extra="[request]\ntimeout = inf\n"),
        ("request.timeout", "Infinity"),
        ".toml",
    ),
    Case(
        "timeout-1e300",
        "check",
        _json(extra=', "request": {"idle_timeout_s": 1e300}'),
        ("request.idle_timeout_s", "1e+300"),
    ),
    Case(
        "profile-name-pipe",
        "run",
        _json(extra=', "workload": {"a|b": {"prompt_tokens": 10}}'),
        ("profile name 'a|b'", "A-Z a-z 0-9"),
    ),
    Case("prompt-name-pipe", "check", _json(extra=', "test_prompts": {"x|y": "hi"}'), ("profile name 'x|y'",)),
    Case("model-key-space", "run", _json().replace('"a":', '"my model":'), ("model key 'my model'",)),
    Case("duplicate-json-key", "run", _json(model=', "id": "other"'), ("'id'", "given twice")),
    Case("duplicate-top-key", "check", _json(extra=', "base_url": "{url}"'), ("'base_url'", "given twice")),
    Case("duplicate-toml-key", "check", _toml(extra='id = "again"\n'), ("invalid TOML",), ".toml"),
    Case("huge-integer", "check", _json(extra=', "seed": 1' + "0" * 5000), ("unreadable value",)),
    Case("seed-negative", "run", _json(extra=', "seed": -1'), ("seed", "-1")),
    *[
        Case(
            f"userinfo-{c}",
            c,
            _json(f"http://user:{PASSWORD}@127.0.0.1:{{port}}/api"),
            ("base_url", "user:password@", "api_key_env"),
        )
        for c in ("check", "run")
    ],
    Case(
        "userinfo-model-toml",
        "run",
        _toml(extra=f'base_url = "http://u:{PASSWORD}@127.0.0.1:1/api"\n'),
        ("models.a.base_url", "credentials"),
        ".toml",
    ),
    Case("check-max-tokens", "check", _json(), ("--max-tokens", "1000000000"), flags=("--max-tokens", "1000000000")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_is_sent(case: Case, server: _Counting, tmp_path: Path) -> None:
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/api"
    config = tmp_path / f"config{case.suffix}"
    config.write_text(case.text.replace("{url}", url).replace("{port}", str(port)), encoding="utf-8")
    args = [case.command, "-c", str(config), *case.flags]
    if case.command == "run":
        args += (
            ["--results", str(tmp_path / "results"), "--duration", "2s"]
            if "--duration" not in case.flags
            else ["--results", str(tmp_path / "results")]
        )
    before = server.connections
    done = subprocess.run(attnload(*args), capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_env())
    lines = done.stderr.splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[0].startswith(f"attnload {case.command}: error: "), lines[0]
    for expected in case.expected:
        assert expected in lines[0], (expected, lines[0])
    assert PASSWORD not in done.stderr + done.stdout
    assert server.connections == before, "the bad input was sent"
    assert not (tmp_path / "results").exists()


def test_a_password_in_base_url_reaches_no_output_file(server: _Counting, tmp_path: Path) -> None:
    """Refused before any output exists: no file under the results (or anywhere the run wrote) holds it."""
    config = tmp_path / "c.json"
    config.write_text(_json(f"http://user:{PASSWORD}@127.0.0.1:{server.server_address[1]}/api"), encoding="utf-8")
    results = tmp_path / "results"
    done = subprocess.run(
        attnload("run", "-c", str(config), "--results", str(results), "--duration", "2s"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=_env(),
    )
    assert done.returncode == 2 and PASSWORD not in done.stderr + done.stdout
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != config]
    assert all(PASSWORD.encode() not in p.read_bytes() for p in written), written


def test_a_config_at_every_limit_still_loads(tmp_path: Path) -> None:
    """The bounds refuse absurd values only: the largest allowed value of each loads."""
    from attnload.config.load import load_config

    config = tmp_path / "c.json"
    profile = {
        "prompt_tokens": limits.MAX_PROMPT_TOKENS,
        "max_tokens": limits.MAX_OUTPUT_TOKENS,
        "weight": limits.MAX_WEIGHT,
    }
    extra = (
        ', "workload": '
        + json.dumps({"p.1_x:y-z": profile})
        + ', "request": '
        + json.dumps({"total_timeout_s": limits.MAX_TIMEOUT_S})
    )
    config.write_text(
        _json("http://127.0.0.1:65535/api", model=f', "weight": {limits.MAX_WEIGHT}', extra=extra), encoding="utf-8"
    )
    loaded = load_config(config)
    assert loaded.models[0].weight == limits.MAX_WEIGHT
    assert loaded.profiles[0].name == "p.1_x:y-z" and loaded.profiles[0].prompt_tokens == limits.MAX_PROMPT_TOKENS
    assert loaded.request.total_timeout_s == limits.MAX_TIMEOUT_S


def test_brackets_in_strings_and_comments_are_not_nesting(tmp_path: Path) -> None:
    """The depth pre-scan blanks strings (and TOML comments) first: a prompt full of brackets is fine."""
    from attnload.config.load import load_config

    brackets = "[{" * 200 + '\\"'
    as_json = tmp_path / "c.json"
    as_json.write_text(
        _json("http://127.0.0.1:1/api", extra=', "test_prompts": ' + json.dumps({"p": brackets})), encoding="utf-8"
    )
    assert load_config(as_json).profiles[0].prompt == brackets
    as_toml = tmp_path / "c.toml"
    as_toml.write_text(
        _toml(
            "http://127.0.0.1:1/api",
            extra="# "
            + "[" * 100
            + "\n[test_prompts]\n"
            + f'p = {json.dumps(brackets)}\nq = \'{"[" * 50}\'\nr = """\n{"{" * 50}"""\n',
        ),
        encoding="utf-8",
    )
    prompts = {p.name: p.prompt for p in load_config(as_toml).profiles}
    assert prompts == {"p": brackets, "q": "[" * 50, "r": "{" * 50}


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("https://host.example/api", True),
        ("http://[::1]:8000/api", True),
        ("http://host:65535", True),
        ("http://host:0/api", False),
        ("http://host:65536", False),
        ("http://host:x/api", False),
        ("ftp://host/api", False),
        ("http:///api", False),
        ("http://[::1/api", False),
        ("http://host/a\tb", False),
        ("http://host/api\x00", False),
        ("http://u@host/api", False),
    ],
)
def test_check_url(url: str, ok: bool) -> None:
    from attnload.config.urls import check_url

    if ok:
        assert check_url(url) == url
    else:
        with pytest.raises(ValueError) as error:
            check_url(url)
        assert "\n" not in str(error.value)


def test_the_limits_doc_lists_every_limit() -> None:
    doc = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    for name in dir(limits):
        if name.startswith("MAX_"):
            assert f"`{name}`" in doc, name


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")}
    return {**env, "NO_PROXY": "*"}
