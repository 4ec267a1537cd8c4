"""``attnload sim``: the simulator's own command line (``attnload.sim.cli``) behind the common dispatch."""

from attnload.sim.cli import configure, run

__all__ = ["configure", "run"]
