"""The ``attnload`` command line: one subcommand per module, errors as one line, exit 2.

Each subcommand lives in its own module exposing ``configure(parser)`` and
``run(args) -> int``; this file only dispatches, imports lazily (so ``attnload sim``
does not pay for Locust and gevent) and turns :class:`UsageError` into one line on
stderr with exit status 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from attnload import __version__
from attnload.errors import UsageError, redact

SUBCOMMANDS = {
    "demo": (
        "attnload.commands.demo",
        "run the built-in GQA-vs-MLA demo against the simulator (no network, no key; "
        "--engine vllm: real vLLM CPU servers)",
    ),
    "run": ("attnload.commands.run", "run a load test from a config file"),
    "sim": ("attnload.commands.sim", "serve the attention-aware OpenAI-compatible simulator"),
    "check": ("attnload.commands.check", "preflight: one tiny request per model, with the fix for each failure"),
    "report": ("attnload.commands.report", "print and render a results file (terminal table, HTML)"),
    "cluster": ("attnload.commands.cluster", "drive the deploy/ manifests with the Kubernetes API"),
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"attnload: error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv_command: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="attnload", description="Compare LLM serving by attention mechanism under load.")
    parser.add_argument("--version", action="version", version=f"attnload {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if argv_command == name:  # only the chosen subcommand's module is imported
            importlib.import_module(module).configure(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(command if command in SUBCOMMANDS else None)
    args = parser.parse_args(args_list)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except UsageError as exc:
        print(f"attnload {args.command}: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"attnload {args.command}: interrupted", file=sys.stderr)
        return 130


BROKEN_PIPE_EXIT = 141
"""128 + SIGPIPE: what a shell reports for a tool that stopped because its reader went away."""


def _reader_gone() -> int:
    """``attnload sim --list | head``: the reader closed the pipe, which is not an error worth a
    traceback. Point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return BROKEN_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
