import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// `npm run dev` proxies the API and the gateway of a local `just up` stack; the production
// build is served by nginx (deploy/nginx/dtq.conf.template), which does the same.
const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
const api = env.DTQ_DASHBOARD_API ?? "http://127.0.0.1:8000";
const gateway = env.DTQ_DASHBOARD_GATEWAY ?? "http://127.0.0.1:8002";

export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    // Nothing inlined as data: URIs, which the Content-Security-Policy does not allow.
    assetsInlineLimit: 0,
  },
  server: {
    port: 3000,
    proxy: {
      "/api": api,
      "/health": api,
      "/ready": api,
      "/schema": api,
      "/ws": { target: gateway, ws: true },
      "/sse": gateway,
    },
  },
});
