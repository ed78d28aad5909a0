# The README's two commands are `make demo` (the main job) and `make test` (every check).
# Both install what they need on a fresh machine with only Python 3.11+: uv comes through pip
# when it is missing, then uv builds the locked environment in .venv.
SHELL := /bin/bash
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
RUN := $(UV) run --frozen

.PHONY: all bootstrap sync demo test lint typecheck layers pytest bench proto fmt clean

all: test

bootstrap:
	@command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1 || \
		$(PYTHON) -m pip install --quiet --disable-pip-version-check "uv>=0.8"

sync: bootstrap
	@$(UV) sync --frozen --quiet

demo: sync
	@# grpc-core logs each plugin connection closed at the end at info level: noise here.
	GRPC_VERBOSITY=$${GRPC_VERBOSITY:-ERROR} $(RUN) python -m hami_kubesim.demo $(DEMO_ARGS)

lint: sync
	$(RUN) ruff check .
	$(RUN) ruff format --check .

typecheck: sync
	$(RUN) mypy libs/protocol/src libs/kube/src libs/runtime/src libs/kubeletapi/src libs/kubesim/src services/scheduler/src services/webhook/src services/deviceplugin/src tools/kubectl/src

layers: sync
	$(RUN) lint-imports

pytest: sync
	$(RUN) pytest $(PYTEST_ARGS)

test: lint typecheck layers pytest

bench: sync
	@for b in bench/*.py; do echo "== $$b"; $(RUN) python $$b || exit 1; done

proto: sync
	$(RUN) python -m hami_kubelet_api.generate

fmt: sync
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

clean:
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .import_linter_cache

# --- container images (deploy/docker) ------------------------------------------------------------
# One image per service, plus kubesim for docker-compose.yml, tagged hami-<name>:$(IMAGE_TAG). Built
# when a container engine answers `$(DOCKER) info`; elsewhere the target says so and succeeds.
DOCKER ?= docker
IMAGE_TAG ?= 0.1.0
IMAGE_PREFIX ?=
IMAGES := scheduler webhook deviceplugin kubesim

.PHONY: images
images:
	@if ! $(DOCKER) info >/dev/null 2>&1; then \
		echo "images: skipped, no container engine answers '$(DOCKER) info'"; \
		exit 0; \
	fi; \
	revision=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown); \
	created=$$(date -u +%Y-%m-%dT%H:%M:%SZ); \
	for image in $(IMAGES); do \
		echo "== $(IMAGE_PREFIX)hami-$$image:$(IMAGE_TAG)"; \
		DOCKER_BUILDKIT=1 $(DOCKER) build -f deploy/docker/$$image.Dockerfile \
			--build-arg VERSION=$(IMAGE_TAG) --build-arg REVISION=$$revision \
			--build-arg CREATED=$$created -t $(IMAGE_PREFIX)hami-$$image:$(IMAGE_TAG) . || exit 1; \
	done
