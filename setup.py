"""Build hook for the optional C extension ``attnload.native._fastpath`` (everything else is in pyproject.toml).

Why optional: the extension only makes the client's per-chunk work cheaper (docs/performance.md);
without a C compiler or Python headers the build warns once and the package installs with the
pure-Python path, which attnload announces in one log line the first time a client runs.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a missing compiler leaves the pure-Python path."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "use the fallback"
            self._skipped(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skipped(exc)

    @staticmethod
    def _skipped(exc: BaseException) -> None:
        print(
            f"attnload: the C extension was not built ({exc}); the pure-Python client path will be used",
            file=sys.stderr,
        )


setup(
    ext_modules=[
        Extension(
            "attnload.native._fastpath",
            [  # one file per Python it mirrors (native/fastpath.h says which)
                "src/attnload/native/module.c",
                "src/attnload/native/sse.c",
                "src/attnload/native/stream.c",
                "src/attnload/native/readloop.c",
                "src/attnload/native/histogram.c",
            ],
            depends=["src/attnload/native/fastpath.h"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
