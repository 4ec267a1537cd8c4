"""Build hooks: the optional C extension ``attnload.native._fastpath`` and deploy/ as package data.

Everything else is in pyproject.toml.

Why optional: the extension only makes the client's per-chunk work cheaper (docs/performance.md);
without a C compiler or Python headers the build warns once and the package installs with the
pure-Python path, which attnload announces in one log line the first time a client runs.

Why deploy/ is copied here: it is committed once, at the repository root, where
``kubectl apply -f deploy/`` reads it; a wheel needs it inside the package so that
``attnload cluster up`` works without a checkout (attnload/cluster/packaged.py). MANIFEST.in
puts deploy/ in the sdist, so a wheel built from the sdist carries it too.
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

DEPLOY = Path("deploy")
DEPLOY_DATA = Path("attnload", "cluster", "deploy_data")  # inside the built package; packaged.py reads it


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


class BuildPyWithDeploy(build_py):
    """build_py that also copies deploy/ into the built package as attnload/cluster/deploy_data/."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's deploy/ itself
            return
        for source in self._deploy_files():
            target = self._target(source)
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs: list[str] = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return outputs + [str(self._target(source)) for source in self._deploy_files()]

    def _target(self, source: Path) -> Path:
        return Path(self.build_lib) / DEPLOY_DATA / source.relative_to(DEPLOY)

    @staticmethod
    def _deploy_files() -> list[Path]:
        if not DEPLOY.is_dir():  # a wheel without the manifests would fail only at `attnload cluster up`
            raise FileNotFoundError(f"{DEPLOY}/ is missing from the source tree; the wheel must carry it")
        return sorted(path for path in DEPLOY.rglob("*") if path.is_file())


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
                "src/attnload/native/decodefit.c",
            ],
            depends=["src/attnload/native/fastpath.h"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithDeploy},
)
