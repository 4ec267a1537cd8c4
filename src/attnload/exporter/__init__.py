"""Prometheus exposition of the master's merged series; every metric name is spelled once,
in ``names``."""
