"""Where ``attnload cluster up`` finds deploy/ when no ``--manifests DIR`` names it.

deploy/ is the one copy in the repository (``kubectl apply -f deploy/``, the root
kustomization). The wheel carries it as package data, ``attnload/cluster/deploy_data/``,
copied at build time by setup.py's build_py (an sdist includes deploy/ through
MANIFEST.in, so a wheel built from it carries it too); the copy is never committed.
The directory is, in this order:

1. ``--manifests DIR`` when given (cli.py);
2. ``./deploy`` when the working directory has one, so a checkout's local edits apply;
3. ``deploy_data/`` inside the installed package: a wheel, without a checkout;
4. the checkout's deploy/ beside ``src/``: an editable install run from elsewhere, which
   has no ``deploy_data/`` because no build step copied it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DATA_DIR = "deploy_data"
# src/attnload/cluster/packaged.py -> the checkout root (parents: cluster, attnload, src, root)
_CHECKOUT_DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def packaged_dir() -> Path:
    """deploy_data/ of the installed package, as a real directory (absent in a checkout)."""
    return Path(str(resources.files("attnload.cluster") / DATA_DIR))


def installed_or_checkout_dir() -> Path:
    """The wheel's deploy_data/ when it is there, else the checkout's deploy/ (steps 3 and 4)."""
    packaged = packaged_dir()
    return packaged if packaged.is_dir() else _CHECKOUT_DEPLOY
