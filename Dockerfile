# One image for the Locust master, the Locust workers and the simulator.
#   podman build -t attnload .        (or: make test-image, which also smoke-tests it)
# The roles differ only by command: `attnload sim ...`, `locust -f /app/locustfiles/chat.py
# --master|--worker ...` (see deploy/). Runs as uid 10001 and works with a read-only
# root filesystem: writes go to /tmp and $ATTNLOAD_RESULTS (emptyDir volumes in deploy/).

# Pinned by date tag; pin by digest too where your registry policy wants it.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-20250520-slim

# ---------------------------------------------------------------- build: a venv with attnload
FROM ${BASE_IMAGE} AS build
# gcc and the Python headers build the compiled client path (attnload.native._fastpath); the runtime stage
# needs neither, and without them pip would still install the pure-Python path.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates gcc libc6-dev python3-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/attnload
WORKDIR /src
# .dockerignore is an allowlist: only pyproject, setup.py, constraints.txt, README, src, deploy (package data),
# locustfiles, examples arrive. constraints.txt pins every dependency to the versions CI tested; no extras:
# the image runs the master, the workers and the simulator, and `attnload cluster` (attnload[cluster], the
# Kubernetes client) runs where the cluster is driven from, not in it.
COPY . .
# An optional build secret `cacert` lets pip through a TLS-intercepting proxy without
# baking the bundle into a layer: podman build --secret id=cacert,src=/etc/ssl/certs/ca-certificates.crt
RUN --mount=type=secret,id=cacert,required=false \
    if [ -s /run/secrets/cacert ]; then export PIP_CERT=/run/secrets/cacert; fi; \
    /opt/attnload/bin/pip install --no-cache-dir --disable-pip-version-check -c constraints.txt . \
 && /opt/attnload/bin/pip uninstall -y --disable-pip-version-check pip

# ---------------------------------------------------------------- runtime: python + the venv
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* \
 && useradd --system --uid 10001 --gid 0 --home-dir /app --no-create-home --shell /usr/sbin/nologin attnload \
 && mkdir -p /app /results \
 && chown 10001:0 /results && chmod 0775 /results
COPY --from=build /opt/attnload /opt/attnload
COPY locustfiles /app/locustfiles
COPY examples /app/examples
ENV PATH=/opt/attnload/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    ATTNLOAD_RESULTS=/results
WORKDIR /app
# Numeric uid so Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 10001
EXPOSE 5557 5558 8000 8089 9646
# Role-agnostic: probes ATTNLOAD_HEALTH_URL when set (e.g. http://127.0.0.1:8000/health for the
# simulator); Kubernetes uses the httpGet probes in deploy/ instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD ["python3", "-m", "attnload.cluster.healthcheck"]
ENTRYPOINT ["attnload"]
CMD ["--help"]
