"""The report's view of decode steps beyond latency: speculation (tokens per step, acceptance) and prefill
interference (decode ITL without and during injected prefills), as console tables and HTML charts."""
