"""The collecting side of a Locust process (the master, or a single local process): merged counts,
the fleet, the server and GPU views, the live progress line and the results."""
