"""The simulator's HTTP face: the OpenAI-compatible server (``server``) and the server-side truth it
exposes on ``/stats`` and ``/metrics`` (``truth``), over the engines of the package above."""
