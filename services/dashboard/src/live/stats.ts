// Throughput and latency derived from the live events (no polling): counts per bucket of
// outcomes, and run times measured from task.started to its outcome (Redis timestamps). The
// connection's first subscription replays the window's events, so the buckets cover the
// minutes before the page opened too.
import type { EventFrame } from "./connection";

export const BUCKET_S = 5;
export const WINDOW_BUCKETS = 60; // five minutes
const FEED_SIZE = 200;
const STARTED_REMEMBERED = 20_000;

export type Bucket = {
  start: number; // seconds since the epoch
  succeeded: number;
  failed: number; // tasks that ended failing: dead, failed (DLQ off), expired
  retried: number; // failed attempts with attempts left (task.retrying)
  submitted: number;
  runTimes: number[]; // seconds
};

export type Snapshot = {
  buckets: Bucket[];
  feed: EventFrame[];
  version: number;
};

const FAILURES = new Set(["task.dead", "task.failed", "task.expired"]);

export function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index] ?? null;
}

export class LiveStats {
  private buckets = new Map<number, Bucket>();
  private started = new Map<string, number>();
  private feed: EventFrame[] = [];
  private version = 0;
  private listeners = new Set<() => void>();
  private snapshot: Snapshot = this.build();
  private notifyScheduled = false;

  add(frame: EventFrame): void {
    const ts = frame.ts ?? Date.now() / 1000;
    const bucket = this.bucket(ts);
    switch (frame.type) {
      case "task.queued":
      case "task.scheduled":
        if (frame.reason === null) bucket.submitted += 1;
        break;
      case "task.started":
        if (frame.task_id) {
          this.started.set(frame.task_id, ts);
          if (this.started.size > STARTED_REMEMBERED) {
            const oldest = this.started.keys().next().value;
            if (oldest !== undefined) this.started.delete(oldest);
          }
        }
        break;
      case "task.succeeded":
        bucket.succeeded += 1;
        this.recordRunTime(frame.task_id, ts, bucket);
        break;
      case "task.retrying":
        bucket.retried += 1;
        this.recordRunTime(frame.task_id, ts, bucket);
        break;
      default:
        if (FAILURES.has(frame.type)) {
          bucket.failed += 1;
          this.recordRunTime(frame.task_id, ts, bucket);
        }
    }
    this.feed.unshift(frame);
    if (this.feed.length > FEED_SIZE) this.feed.length = FEED_SIZE;
    this.changed();
  }

  /** Drop buckets that left the window (called by the clock, so quiet charts still move). */
  tick(): void {
    const oldest = this.currentStart() - (WINDOW_BUCKETS - 1) * BUCKET_S;
    for (const start of this.buckets.keys()) if (start < oldest) this.buckets.delete(start);
    this.changed();
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  getSnapshot(): Snapshot {
    return this.snapshot;
  }

  private recordRunTime(taskId: string | null, ts: number, bucket: Bucket): void {
    if (!taskId) return;
    const started = this.started.get(taskId);
    if (started === undefined) return;
    this.started.delete(taskId);
    bucket.runTimes.push(Math.max(0, ts - started));
  }

  private currentStart(): number {
    return Math.floor(Date.now() / 1000 / BUCKET_S) * BUCKET_S;
  }

  private bucket(ts: number): Bucket {
    const start = Math.floor(ts / BUCKET_S) * BUCKET_S;
    let bucket = this.buckets.get(start);
    if (!bucket) {
      bucket = { start, succeeded: 0, failed: 0, retried: 0, submitted: 0, runTimes: [] };
      this.buckets.set(start, bucket);
    }
    return bucket;
  }

  private changed(): void {
    // Many events arrive in one message: re-render once per frame, not once per event.
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    queueMicrotask(() => {
      this.notifyScheduled = false;
      this.version += 1;
      this.snapshot = this.build();
      for (const listener of this.listeners) listener();
    });
  }

  private build(): Snapshot {
    const end = this.currentStart();
    const buckets: Bucket[] = [];
    for (let i = WINDOW_BUCKETS - 1; i >= 0; i -= 1) {
      const start = end - i * BUCKET_S;
      buckets.push(
        this.buckets.get(start) ?? { start, succeeded: 0, failed: 0, retried: 0, submitted: 0, runTimes: [] },
      );
    }
    return { buckets, feed: [...this.feed], version: this.version };
  }
}
