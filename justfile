# dtq: run `just` (or ./dev) to list the recipes.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List recipes
default:
    @just --list

# Install every workspace package and the dev tools into .venv (from uv.lock)
setup:
    uv sync --all-packages --locked --quiet

# `--redis cluster`: on a local 6-node Redis Cluster; `--redis sentinel`: on a master, a replica
# and 3 sentinels (docs/scaling.md).
# Start redis and every service as local processes, in the foreground (Ctrl-C stops all)
up *ARGS: setup
    uv run --all-packages python deploy/local/run.py {{ARGS}}

# Stop the `just up` running in another terminal (as Ctrl-C there would)
down *ARGS:
    uv run --all-packages python deploy/local/run.py --down {{ARGS}}

# Each run starts its own Redis. `DTQTEST_TOPOLOGIES=` skips the cluster and Sentinel runs,
# `DTQTEST_TOPOLOGIES=cluster` keeps one (docs/testing.md).
# The whole suite on one Redis (slow tests included), then `test-topology` cluster and sentinel
test *ARGS: setup
    #!/usr/bin/env bash
    set -uo pipefail
    failed=()
    uv run --all-packages pytest {{ARGS}} || failed+=(standalone)
    for topology in ${DTQTEST_TOPOLOGIES-cluster sentinel}; do
      "{{just_executable()}}" test-topology "$topology" || failed+=("$topology")
    done
    if [ ${#failed[@]} -gt 0 ]; then echo "just test: failed on ${failed[*]}" >&2; exit 1; fi

# The SDK, services and integration suites (not the slow ones) on TOPOLOGY: cluster or sentinel
test-topology TOPOLOGY *ARGS: setup
    uv run --all-packages pytest -m "not slow" --redis {{TOPOLOGY}} libs/dtq-core/tests services tests/integration {{ARGS}}

# Fast local loop: skip the slow fault-injection tests and the other topologies' runs
test-fast *ARGS: setup
    uv run --all-packages pytest -m "not slow" {{ARGS}}

# Lint, format check, strict types, and the dependency audit where its services answer
check: setup
    uv run ruff format --check .
    uv run ruff check .
    uv run mypy
    uv run python deploy/audit.py --if-reachable

# Known vulnerabilities in uv.lock (pip-audit) and the dashboard's lockfile (npm audit);
# fails when either cannot run. Accept one in deploy/audit-ignore.toml (id, reason, until)
audit: setup
    uv run python deploy/audit.py

# The dashboard's type check (tsc, the client generated from the OpenAPI included; no linter)
# and its unit tests (vitest: formatting, the live figures, the live connection, the cache)
check-dashboard:
    cd services/dashboard && { [ -e node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }
    cd services/dashboard && npm run gen && npm run typecheck && npm test

# Print the fault tests' figures (.artifacts/faults.jsonl) as a table
faults: setup
    uv run python -m dtq_devtools.testing.figures .artifacts/faults.jsonl

# Format the code
fmt: setup
    uv run ruff format .
    uv run ruff check --fix .

# The soak, nightly-style: SECONDS of open-loop load with 5 % permanent failures (CI runs 60);
# figures (memory and RSS slopes) in .artifacts/faults.jsonl
soak SECONDS="600": setup
    DTQTEST_SOAK_S={{SECONDS}} uv run --all-packages pytest tests/chaos/test_soak.py -k permanent_failures -q --timeout $(( {{SECONDS}} + 300 ))

# `--peers`: BullMQ, huey, taskiq, arq and Celery too, installed at pinned versions under .bench/
# (uv, npm); `--quick`: a smoke run; `--redis cluster`: Redis CPU per master (docs/performance.md).
# Throughput and latency as users see them, against the raw Redis ceilings, in one run
bench *ARGS: setup
    uv run --all-packages python tests/bench/run.py {{ARGS}}

# BuildKit, the host's CA bundle as a build secret; `--env-file deploy/compose/local-bases.env`
# builds on the stand-ins of `just bases` (docs/deployment.md)
# Build the images docker-compose.yml runs, as it describes them
build-images *ARGS: setup
    uv run python deploy/docker/build.py {{ARGS}}

# Only for machines that cannot pull the official images; needs root (debootstrap)
# Build local stand-ins for the official base images from Debian's packages
bases *ARGS:
    bash deploy/docker/bases.sh {{ARGS}}

# Build every image and run the compose stack in a test (starts dockerd when none answers)
test-containers *ARGS: setup
    uv run --all-packages pytest tests/deploy/test_containers.py {{ARGS}}

# Check the images the deployment pulls: exact patch tags, none below its security floor
images *ARGS: setup
    uv run python deploy/images.py {{ARGS}}

# At release: pin every pulled image by digest (needs a Docker client that reaches the registry)
pin-images: setup
    uv run python deploy/images.py --pin --require-digests

# Regenerate the generated docs: the settings table, the hash-field tables, the OpenAPI document
docs: setup
    uv run python -m dtq_devtools.configdoc > docs/configuration.md
    uv run python -m dtq_devtools.fieldsdoc docs/architecture.md
    uv run python -m dtq_ingest_api.openapi > docs/openapi.json
