import { afterEach, describe, expect, it, vi } from "vitest";
import type { QueueHistory } from "../api/types";
import type { EventFrame } from "./connection";
import { LiveStats, MINUTE_MS, logicalQueue, mergeHistory, recent, throughput } from "./stats";

const T0 = Date.parse("2026-03-01T12:00:00Z"); // the history's first minute

function frame(type: string, ts: number, extra: Partial<EventFrame> = {}): EventFrame {
  return {
    type,
    cursor: null,
    ts: ts / 1000,
    queue: "emails",
    task_id: null,
    task: null,
    attempt: null,
    worker: null,
    reason: null,
    data: null,
    ...extra,
  };
}

/** Three minutes of history, read 30 s into the last one. */
function history(overrides: Partial<QueueHistory> = {}): QueueHistory {
  return {
    range: "1h",
    queue: null,
    queues: ["emails"],
    step_s: 60,
    start_ms: T0,
    as_of_ms: T0 + 2 * MINUTE_MS + 30_000,
    submitted: [5, 0, 1],
    succeeded: [3, 2, 0],
    retried: [1, 0, 0],
    failed: [1, 0, 0],
    expired: [0, 1, 0],
    run_count: [5, 2, 0],
    run_total_s: [10, 1, 0],
    run_max_s: [4, 0.75, null],
    waiting: [7, null, 2],
    in_flight: [1, null, 0],
    delayed: [0, null, 3],
    ...overrides,
  };
}

afterEach(() => {
  vi.useRealTimers();
});

describe("mergeHistory", () => {
  it("lays the history out per minute, failures with expiries, means from totals", () => {
    const s = mergeHistory(history(), new Map(), T0 + 2 * MINUTE_MS + 40_000);
    expect(s.times).toEqual([T0 / 1000, T0 / 1000 + 60, T0 / 1000 + 120]);
    expect(s.succeeded).toEqual([3, 2, 0]);
    expect(s.failed).toEqual([1, 1, 0]);
    expect(s.runMeanS).toEqual([2, 0.5, null]);
    expect(s.runMaxS).toEqual([4, 0.75, null]);
    // A minute no leader noted has no depth (a gap in the chart), not 0.
    expect(s.waiting).toEqual([7, null, 2]);
  });

  it("adds the events after the read, not those before it", async () => {
    const stats = new LiveStats();
    const h = history();
    stats.add(frame("task.succeeded", h.as_of_ms - 5_000)); // counted in the history
    stats.add(frame("task.succeeded", h.as_of_ms + 1_000));
    stats.add(frame("task.dead", h.as_of_ms + 2_000));
    stats.add(frame("task.expired", h.as_of_ms + 2_500));
    stats.add(frame("task.retrying", h.as_of_ms + 3_000));
    stats.add(frame("task.queued", h.as_of_ms + 4_000)); // a submit
    stats.add(frame("task.queued", h.as_of_ms + 4_000, { reason: "promoted" })); // not one
    const s = mergeHistory(h, stats.byMinute(h.as_of_ms, null), h.as_of_ms + 10_000);
    expect(s.succeeded).toEqual([3, 2, 1]);
    expect(s.failed).toEqual([1, 1, 2]);
    expect(s.retried).toEqual([1, 0, 1]);
    expect(s.submitted).toEqual([5, 0, 2]);
  });

  it("moves on with the clock: the oldest minutes drop off, new ones start empty", () => {
    const stats = new LiveStats();
    const h = history();
    const later = T0 + 4 * MINUTE_MS + 5_000; // two minutes past the history's last
    stats.add(frame("task.succeeded", T0 + 4 * MINUTE_MS + 1_000));
    const s = mergeHistory(h, stats.byMinute(h.as_of_ms, null), later, { waiting: 9, inFlight: 2, delayed: 1 });
    expect(s.times).toEqual([T0 / 1000 + 120, T0 / 1000 + 180, T0 / 1000 + 240]);
    expect(s.succeeded).toEqual([0, 0, 1]);
    expect(s.submitted).toEqual([1, 0, 0]);
    // The current minute shows the depth now; a minute with neither note nor now, none.
    expect(s.waiting).toEqual([2, null, 9]);
    expect(s.inFlight).toEqual([0, null, 2]);
    expect(s.delayed).toEqual([3, null, 1]);
  });

  it("measures run times from the start event to the outcome and keeps the longest", () => {
    const stats = new LiveStats();
    const h = history();
    const at = h.as_of_ms + 1_000;
    stats.add(frame("task.started", at, { task_id: "emails:a" }));
    stats.add(frame("task.started", at, { task_id: "emails:b" }));
    stats.add(frame("task.succeeded", at + 2_000, { task_id: "emails:a" }));
    stats.add(frame("task.retrying", at + 6_000, { task_id: "emails:b" }));
    stats.add(frame("task.succeeded", at + 7_000, { task_id: "emails:unknown" })); // no start seen
    const s = mergeHistory(h, stats.byMinute(h.as_of_ms, null), at + 10_000);
    expect(s.runCount[2]).toBe(2);
    expect(s.runMeanS[2]).toBeCloseTo(4);
    expect(s.runMaxS[2]).toBeCloseTo(6);
    expect(s.succeeded[2]).toBe(2);
  });

  it("counts one queue's events, a partition's as its queue's", () => {
    const stats = new LiveStats();
    const h = history();
    stats.add(frame("task.succeeded", h.as_of_ms + 1_000, { queue: "hot~2" }));
    stats.add(frame("task.succeeded", h.as_of_ms + 1_000, { queue: "hot" }));
    stats.add(frame("task.succeeded", h.as_of_ms + 1_000, { queue: "emails" }));
    expect(mergeHistory(h, stats.byMinute(h.as_of_ms, "hot"), h.as_of_ms).succeeded[2]).toBe(2);
    expect(mergeHistory(h, stats.byMinute(h.as_of_ms, null), h.as_of_ms).succeeded[2]).toBe(3);
    expect(logicalQueue("hot~12")).toBe("hot");
    expect(logicalQueue("plain")).toBe("plain");
  });
});

describe("LiveStats", () => {
  it("keeps the latest events for the feed, newest first, and tells its listeners once per batch", async () => {
    const stats = new LiveStats();
    const heard = vi.fn();
    stats.subscribe(heard);
    for (let i = 0; i < 250; i += 1) stats.add(frame("task.succeeded", T0 + i, { task_id: `emails:${i}` }));
    await Promise.resolve(); // listeners hear on the next microtask
    expect(heard).toHaveBeenCalledTimes(1);
    const snap = stats.getSnapshot();
    expect(snap.feed).toHaveLength(200);
    expect(snap.feed[0]?.task_id).toBe("emails:249");
    expect(snap.version).toBe(1);
  });

  it("forgets ticks older than a quarter of an hour", () => {
    vi.useFakeTimers();
    vi.setSystemTime(T0 + 20 * MINUTE_MS);
    const stats = new LiveStats();
    stats.add(frame("task.succeeded", T0)); // 20 minutes ago
    stats.add(frame("task.succeeded", T0 + 19 * MINUTE_MS));
    expect([...stats.byMinute(0, null).values()].reduce((n, c) => n + c.succeeded, 0)).toBe(2);
    stats.tick();
    expect([...stats.byMinute(0, null).values()].reduce((n, c) => n + c.succeeded, 0)).toBe(1);
  });
});

describe("recent and throughput", () => {
  it("add up the last minutes and rate the succeeded since the previous minute began", () => {
    const s = mergeHistory(history(), new Map(), T0 + 2 * MINUTE_MS + 30_000);
    expect(recent(s, 2)).toEqual({ succeeded: 2, failed: 1, retried: 0, runMeanS: 0.5, runMaxS: 0.75 });
    expect(recent(s, 5).succeeded).toBe(5);
    expect(recent(s, 5).runMeanS).toBeCloseTo(11 / 7);
    // 2 in the previous minute and 0 in this one, over 60 + 30 seconds.
    expect(throughput(s, T0 + 2 * MINUTE_MS + 30_000)).toBeCloseTo(2 / 90);
  });
});
