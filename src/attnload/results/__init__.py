"""The typed results model (``attnload.results/v1``), how it is summarized from the
recorder, and how it is written at the end of a run."""
