"""The ``attnload`` entry points: ``run``, ``demo``, ``check``, ``report``, ``sim``, ``cluster``
and ``seed-script`` (``cli.main`` dispatches), plus the packaged locustfile."""
