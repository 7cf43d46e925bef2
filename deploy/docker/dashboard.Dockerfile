# The dashboard: the single-page app built with node inside this build, served by unprivileged
# nginx with the config rendered at build time by deploy/nginx/render.py (proxies /api/,
# /health, /ready, /ws/ and /sse/ to the compose services ingest-api and event-gateway).
#
#   docker build -f deploy/docker/dashboard.Dockerfile -t dtq-dashboard .
#
# NODE_IMAGE, PYTHON_IMAGE and NGINX_IMAGE are the bases: the official images by default
# (`just pin-images` pins them by digest at release); deploy/docker/bases.sh builds stand-ins
# where they cannot be pulled. npm trusts the BuildKit secret `ca` when one is given (never
# stored in a layer). Node 20.19 is the floor of the SPA's toolchain (vite 8).

ARG NODE_IMAGE=node:20.20.2-bookworm-slim
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG NGINX_IMAGE=nginxinc/nginx-unprivileged:1.28.0-alpine

FROM ${NODE_IMAGE} AS spa
WORKDIR /src/services/dashboard
COPY services/dashboard/package.json services/dashboard/package-lock.json ./
RUN --mount=type=secret,id=ca \
    --mount=type=cache,target=/root/.npm \
    if [ -f /run/secrets/ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/ca; fi \
    && npm ci --no-audit --no-fund --loglevel=error
# The API client types are generated from the OpenAPI document.
COPY docs/openapi.json /src/docs/openapi.json
COPY services/dashboard/ ./
RUN npm run build

FROM ${PYTHON_IMAGE} AS conf
WORKDIR /src
COPY deploy/nginx/ deploy/nginx/
ARG API=ingest-api:8000
ARG GATEWAY=event-gateway:8002
RUN python deploy/nginx/render.py --listen 8080 --api "${API}" --gateway "${GATEWAY}" \
        --root /usr/share/nginx/html --runtime /tmp > /src/nginx.conf

FROM ${NGINX_IMAGE} AS runtime
COPY --from=spa /src/services/dashboard/dist/ /usr/share/nginx/html/
COPY --from=conf /src/nginx.conf /etc/nginx/nginx.conf
USER 101:101
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/"]
CMD ["nginx", "-c", "/etc/nginx/nginx.conf", "-p", "/tmp", "-g", "daemon off;"]
