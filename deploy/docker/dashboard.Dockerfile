# The dashboard: the single-page app built with node, served by unprivileged nginx with the
# config rendered at build time by deploy/nginx/render.py (proxies /api/, /health, /ready,
# /ws/ and /sse/ to the compose services ingest-api and event-gateway).
#
#   docker build -f deploy/docker/dashboard.Dockerfile -t dtq-dashboard .
#
# At release, `just pin-images` pins the base images by digest.

FROM node:20.18.1-bookworm-slim AS spa
WORKDIR /src/services/dashboard
COPY services/dashboard/package.json services/dashboard/package-lock.json ./
RUN npm ci --no-audit --no-fund
# The API client types are generated from the OpenAPI document.
COPY docs/openapi.json /src/docs/openapi.json
COPY services/dashboard/ ./
RUN npm run build

FROM python:3.11.14-slim-bookworm AS conf
WORKDIR /src
COPY deploy/nginx/ deploy/nginx/
ARG API=ingest-api:8000
ARG GATEWAY=event-gateway:8002
RUN python deploy/nginx/render.py --listen 8080 --api "${API}" --gateway "${GATEWAY}" \
        --root /usr/share/nginx/html --runtime /tmp > /src/nginx.conf

FROM nginxinc/nginx-unprivileged:1.28.0-alpine AS runtime
COPY --from=spa /src/services/dashboard/dist/ /usr/share/nginx/html/
COPY --from=conf /src/nginx.conf /etc/nginx/nginx.conf
USER 101:101
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/"]
CMD ["nginx", "-c", "/etc/nginx/nginx.conf", "-p", "/tmp", "-g", "daemon off;"]
