# syntax=docker/dockerfile:1.7
# hami-scheduler: the kube-scheduler extender (python -m hami_scheduler).
# Build from the repository root:  docker build -f deploy/docker/scheduler.Dockerfile -t hami-scheduler .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.8

FROM ${UV_IMAGE} AS uv

# --- builder: the locked environment of this one package, installed (not editable) in /opt/venv.
FROM ${PYTHON_IMAGE} AS builder
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3 \
    UV_PROJECT_ENVIRONMENT=/opt/venv
WORKDIR /src
# Dependencies first (cached until the lock or a pyproject changes). uv needs every workspace
# member's pyproject.toml to read the workspace, though only this package's dependencies install.
COPY pyproject.toml uv.lock ./
COPY libs/protocol/pyproject.toml libs/protocol/
COPY libs/kube/pyproject.toml libs/kube/
COPY libs/runtime/pyproject.toml libs/runtime/
COPY libs/kubeletapi/pyproject.toml libs/kubeletapi/
COPY libs/kubesim/pyproject.toml libs/kubesim/
COPY services/scheduler/pyproject.toml services/scheduler/
COPY services/webhook/pyproject.toml services/webhook/
COPY services/deviceplugin/pyproject.toml services/deviceplugin/
COPY tools/kubectl/pyproject.toml tools/kubectl/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package hami-scheduler
COPY libs/protocol libs/protocol
COPY libs/kube libs/kube
COPY libs/runtime libs/runtime
COPY services/scheduler services/scheduler
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package hami-scheduler

# --- runtime: the interpreter, the venv, a non-root user.
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="hami-scheduler" \
      org.opencontainers.image.description="kube-scheduler extender placing GPU-sharing pods on nodes and devices (HAMi protocol)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm"
RUN groupadd --system --gid 65532 hami \
    && useradd --system --uid 65532 --gid hami --no-create-home --shell /usr/sbin/nologin hami
COPY --from=builder /opt/venv /opt/venv
COPY deploy/docker/healthcheck.py /usr/local/lib/hami/healthcheck.py
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HAMI_HEALTHCHECK_URL=http://127.0.0.1:9395/healthz
# The extender only talks to the API server and answers kube-scheduler: no privileges. (To listen
# on 443 as this user, the chart and compose set net.ipv4.ip_unprivileged_port_start=0.)
USER 65532:65532
# 443: /filter, /bind, /prioritize (HTTPS in the chart); 9395: /metrics, /healthz, /readyz.
EXPOSE 443 9395
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "/usr/local/lib/hami/healthcheck.py"]
ENTRYPOINT ["python", "-m", "hami_scheduler"]
