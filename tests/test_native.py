"""The C sources of ``attnload.native._fastpath`` against what setup.py builds (runs with or without the extension).

A C file that setup.py leaves out still lets the other files compile, but the module then fails to
import (an undefined symbol) and every process silently takes the pure-Python path.
"""

from __future__ import annotations

from helpers import ROOT

NATIVE = ROOT / "src" / "attnload" / "native"


def test_setup_builds_every_c_source_and_depends_on_every_header() -> None:
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    sources = sorted(path.name for path in [*NATIVE.glob("*.c"), *NATIVE.glob("*.h")])
    assert sources and [name for name in sources if f'"src/attnload/native/{name}"' not in setup] == []
