"""The Locust side of a run: what runs inside each Locust process ``attnload run`` (or plain ``locust -f``)
starts. ``sender/`` sends (a worker, or a single process), ``collector/`` collects (the master, or a single
process); this package wires them to Locust's events, its load shape and its signals, and names the
messages between master and workers. It reads the plan (``plan/``), never the other way round."""
