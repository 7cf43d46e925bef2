import { describe, expect, it, vi } from "vitest";
import { ApiError } from "./client";
import { keys, shouldRetry } from "./query";

// The API client is made when its module loads, at the page's origin.
vi.hoisted(() => {
  Object.assign(globalThis, { window: { location: { origin: "http://dash.test" } } });
});

describe("the query cache's retry policy", () => {
  it("retries what may answer otherwise next time, twice at most", () => {
    expect(shouldRetry(0, new ApiError(0, { code: "network_error" }))).toBe(true);
    expect(shouldRetry(0, new ApiError(503, { code: "redis_unavailable" }))).toBe(true);
    expect(shouldRetry(1, new ApiError(429, { code: "rate_limited" }))).toBe(true);
    expect(shouldRetry(0, new TypeError("fetch failed"))).toBe(true);
    expect(shouldRetry(2, new ApiError(503, undefined))).toBe(false);
  });
  it("does not retry a request the API refused", () => {
    for (const status of [400, 401, 403, 404, 422]) expect(shouldRetry(0, new ApiError(status, undefined))).toBe(false);
  });
});

describe("query keys", () => {
  it("name the operation and every parameter, so two views share an answer only when they ask the same", () => {
    expect(keys.queues()).toEqual(["queues"]);
    expect(keys.history("6h", null)).toEqual(["history", "6h", null]);
    expect(keys.history("6h", "emails")).not.toEqual(keys.history("6h", null));
    expect(keys.tasks({ queue: "a", status: null, task: null, cursor: "c" })).toEqual([
      "tasks",
      { queue: "a", status: null, task: null, cursor: "c" },
    ]);
  });
});
