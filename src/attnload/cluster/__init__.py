"""Kubernetes side of attnload: the names deploy/ uses, the ConfigMap generator and
``attnload cluster`` (the kubernetes Python client, never a kubectl subprocess)."""
