# The image of dtq's Python services (ingest-api, worker, scheduler-leader, event-gateway), one
# tag per service: the build argument SERVICE (a folder under services/) names the image and
# HEALTHCHECK_URL is its probe. Every tag holds all four services and the `dtq` operator CLI
# (dtq-core), which the compose `migrate` job runs, in one virtual environment: the build
# arguments are read only in the last steps, so the four builds share every layer that costs
# something and the four tags share those layers on disk.
#
#   docker build -f deploy/docker/python.Dockerfile --build-arg SERVICE=worker -t dtq-worker .
#
# Stage 1 installs the locked dependencies (a layer that changes only with uv.lock), then the
# workspace packages without editable links; stage 2 copies only the virtual environment into
# a slim runtime that runs as an unprivileged user.
#
# PYTHON_IMAGE is the base: the official image by default (`just pin-images` pins it by digest
# at release); deploy/docker/bases.sh builds a stand-in where it cannot be pulled. Downloads
# trust the BuildKit secret `ca` when one is given (deploy/docker/build.sh passes the host's
# CA bundle); it is mounted for those steps only and never stored in a layer.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# uv from PyPI, pinned: the same resolver that wrote uv.lock.
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/pip \
    if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && pip install --disable-pip-version-check uv==0.13.9
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/app/.venv
WORKDIR /src
# Every member's pyproject.toml, so that `--locked` can check uv.lock against the workspace.
COPY pyproject.toml uv.lock .python-version ./
COPY libs/dtq-core/pyproject.toml libs/dtq-core/
COPY libs/dtq-devtools/pyproject.toml libs/dtq-devtools/
COPY services/ingest-api/pyproject.toml services/ingest-api/
COPY services/worker/pyproject.toml services/worker/
COPY services/scheduler-leader/pyproject.toml services/scheduler-leader/
COPY services/event-gateway/pyproject.toml services/event-gateway/
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv \
    if [ -f /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
    && uv sync --locked --no-dev --no-install-workspace \
        --package dtq-ingest-api --package dtq-worker \
        --package dtq-scheduler-leader --package dtq-event-gateway
COPY libs/dtq-core/ libs/dtq-core/
COPY services/ services/
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.cache/uv \
    if [ -f /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
    && uv sync --locked --no-dev --no-editable \
        --package dtq-ingest-api --package dtq-worker \
        --package dtq-scheduler-leader --package dtq-event-gateway

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 dtq \
    && useradd --system --uid 10001 --gid dtq --no-create-home --shell /usr/sbin/nologin dtq
COPY --from=build /app/.venv /app/.venv
# The example task registry `just up` runs; real deployments build FROM this image and add
# their own task modules next to it.
COPY examples/ /app/examples/
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DTQ_LOG_JSON=true
WORKDIR /app
USER 10001:10001
# Read only from here on, so that everything above is shared by the four services' tags.
ARG SERVICE
# What HEALTHCHECK fetches: the API's /health unless the build names another (compose passes
# the worker's http://127.0.0.1:8001/health and the scheduler's :8003/health, which fail when
# the event loop is stuck or its Redis round trips stop; docs/deployment.md); a container can
# also set HEALTHCHECK_URL in its environment (a metrics port moved with DTQ_*_METRICS_PORT).
ARG HEALTHCHECK_URL=http://127.0.0.1:8000/health
ENV HEALTHCHECK_URL=${HEALTHCHECK_URL}
RUN test -n "${SERVICE}" && test -x "/app/.venv/bin/dtq-${SERVICE%-leader}"
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=2).status != 200)"]
LABEL org.opencontainers.image.title="dtq-${SERVICE}"
CMD ["python", "-c", "raise SystemExit('set the command: dtq-worker, dtq-scheduler, dtq-ingest-api, dtq-event-gateway or dtq')"]
