"""The ``attnload run`` parent process: its options (the table the Locust processes read too), the checks
of the whole plan before anything starts, and the launch of the Locust master and workers.

The Locust side (``runner/``) reads this package; nothing here imports it."""
