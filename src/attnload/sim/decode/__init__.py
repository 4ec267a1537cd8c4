"""What else a decode step pays besides its own tokens: speculative verify steps (``speculation``) and
prefill chunks of other requests sharing it (``interference``), with their ``--explain`` views (``explain``)."""
