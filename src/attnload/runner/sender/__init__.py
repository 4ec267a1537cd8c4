"""The sending side of a Locust process (a worker, or a single local process): closed-loop users,
the open-loop scheduler, traffic and pacing, and the buffers whose deltas the collector merges."""
