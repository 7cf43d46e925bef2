# One image per Python service of dtq, chosen by the build argument SERVICE (a folder under
# services/: ingest-api, worker, scheduler-leader, event-gateway). Every image also holds the
# `dtq` operator CLI (dtq-core), which the compose `migrate` job runs.
#
#   docker build -f deploy/docker/python.Dockerfile --build-arg SERVICE=worker -t dtq-worker .
#
# Stage 1 installs the locked dependencies (a layer that changes only with uv.lock), then the
# workspace packages without editable links; stage 2 copies only the virtual environment into
# a slim runtime that runs as an unprivileged user. At release, `just pin-images` pins the
# base images by digest.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG SERVICE
# uv from PyPI, pinned: the same resolver that wrote uv.lock.
RUN pip install --no-cache-dir uv==0.13.9
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
RUN test -n "${SERVICE}" && test -f "services/${SERVICE}/pyproject.toml"
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-install-workspace --package "dtq-${SERVICE}"
COPY libs/dtq-core/ libs/dtq-core/
COPY services/ services/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev --no-editable --package "dtq-${SERVICE}"

FROM ${PYTHON_IMAGE} AS runtime
ARG SERVICE
# What HEALTHCHECK fetches: the API's /health unless the build names another (compose passes
# the worker's http://127.0.0.1:8001/health and the scheduler's :8003/health, which fail when
# the event loop is stuck or its Redis round trips stop; docs/deployment.md); a container can
# also set HEALTHCHECK_URL in its environment (a metrics port moved with DTQ_*_METRICS_PORT).
ARG HEALTHCHECK_URL=http://127.0.0.1:8000/health
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
    DTQ_LOG_JSON=true \
    HEALTHCHECK_URL=${HEALTHCHECK_URL}
WORKDIR /app
USER 10001:10001
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=2).status != 200)"]
LABEL org.opencontainers.image.title="dtq-${SERVICE}"
CMD ["python", "-c", "raise SystemExit('set the command: dtq-worker, dtq-scheduler, dtq-ingest-api, dtq-event-gateway or dtq')"]
