// The dashboard's unit tests (`npm test`, `just check-dashboard`): its logic without a
// browser. What needs one (rendering, the real gateway) is tested in tests/e2e.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    environment: "node",
    include: ["src/**/*.test.ts"],
    restoreMocks: true,
  },
});
