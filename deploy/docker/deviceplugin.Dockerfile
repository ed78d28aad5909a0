# syntax=docker/dockerfile:1.7
# hami-deviceplugin: the per-node kubelet device plugin (python -m hami_deviceplugin).
# Build from the repository root:
#   docker build -f deploy/docker/deviceplugin.Dockerfile -t hami-deviceplugin .
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
    uv sync --frozen --no-dev --no-install-workspace --package hami-deviceplugin
COPY libs/protocol libs/protocol
COPY libs/kube libs/kube
COPY libs/runtime libs/runtime
COPY libs/kubeletapi libs/kubeletapi
COPY services/deviceplugin services/deviceplugin
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package hami-deviceplugin

# --- runtime
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="hami-deviceplugin" \
      org.opencontainers.image.description="Kubelet device plugin and node registration for shared GPUs (HAMi protocol)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm"
RUN groupadd --system --gid 65532 hami \
    && useradd --system --uid 65532 --gid hami --no-create-home --shell /usr/sbin/nologin hami
COPY --from=builder /opt/venv /opt/venv
COPY deploy/docker/healthcheck.py /usr/local/lib/hami/healthcheck.py
# NVIDIA_*: the NVIDIA container toolkit then gives the container libnvidia-ml and every GPU, which
# NVML needs to enumerate and watch the node's devices.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    HAMI_HEALTHCHECK_URL=http://127.0.0.1:9397/healthz
# Runs as root on purpose (as HAMi's plugin does): it creates its socket in the kubelet's plugin
# directory (/var/lib/kubelet/device-plugins, root-owned 0750 on the host) and writes HAMi-core's
# host directories (<hook path>/vgpu/containers/<pod>_<container>, mode 0777, and /tmp/vgpulock),
# all owned by root. With the fake backend (demos, compose) nothing of the host is touched and it
# runs fine as the unprivileged "hami" user (uid 65532) defined above.
USER 0:0
# 9397: /metrics, /healthz, /readyz. The kubelet API is a unix socket, no port.
EXPOSE 9397
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "/usr/local/lib/hami/healthcheck.py"]
ENTRYPOINT ["python", "-m", "hami_deviceplugin"]
