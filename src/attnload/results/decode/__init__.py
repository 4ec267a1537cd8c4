"""What the results say about decode steps beyond their latency: what speculation bought (``speculation``)
and how injected prefills stalled the decoders (``interference``)."""
