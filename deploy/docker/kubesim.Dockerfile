# syntax=docker/dockerfile:1.7
# hami-kubesim: the in-memory Kubernetes API server and control-plane stand-ins, the "cluster" of
# the compose stack (hami-kubesim cluster --config FILE). Not for production.
# Build from the repository root:  docker build -f deploy/docker/kubesim.Dockerfile -t hami-kubesim .
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
    uv sync --frozen --no-dev --no-install-workspace --package hami-kubesim
COPY libs/protocol libs/protocol
COPY libs/kube libs/kube
COPY libs/runtime libs/runtime
COPY libs/kubeletapi libs/kubeletapi
COPY libs/kubesim libs/kubesim
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package hami-kubesim

# --- runtime: the interpreter, the venv, a non-root user.
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="hami-kubesim" \
      org.opencontainers.image.description="In-memory Kubernetes API server with admission, scheduling and kubelet stand-ins, for demos and tests" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm"
RUN groupadd --system --gid 65532 hami \
    && useradd --system --uid 65532 --gid hami --no-create-home --shell /usr/sbin/nologin hami \
    && install -d -o 65532 -g 65532 -m 0755 /var/lib/kubesim
COPY --from=builder /opt/venv /opt/venv
COPY deploy/docker/healthcheck.py /usr/local/lib/hami/healthcheck.py
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HAMI_HEALTHCHECK_URL=http://127.0.0.1:8001/healthz
# /var/lib/kubesim: the kubelet stand-ins' plugin directories (kubelet.sock per node), owned by the
# unprivileged user so a volume mounted there is writable.
USER 65532:65532
EXPOSE 8001
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=5 \
    CMD ["python", "/usr/local/lib/hami/healthcheck.py"]
ENTRYPOINT ["hami-kubesim"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8001"]
