"""The ``attnload run`` parent process: its options, the checks of the whole plan before anything
starts, and the launch of the Locust master and workers."""
