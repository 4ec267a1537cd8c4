"""Observability around a run: Grafana dashboards (generated) and a local Prometheus.

``dashboards`` is the one source of the JSON under ``grafana/dashboards/``
(``python -m attnload.dashboards.generate`` rewrites it; a test fails on drift);
``prometheus`` starts and stops a local ``/usr/bin/prometheus`` that scrapes the
master and the simulator. Importing this package starts nothing.
"""
