"""Locust glue: the option table, users, load shapes, events, the per-process runtime, the
open loop, the GC policy and the launch of master and workers."""
