// The overview's figures: the per-minute history read from the API (GET /stats/history: kept
// in Redis, so it covers the hours before the page opened), and on top of it what the live
// events say happened after that read, so the charts move between reads.
//
// An event counts only when it is later than the history's `as_of_ms` (both are Redis time):
// what happened before is in the history already. Events are kept in 100 ms ticks for a
// quarter of an hour, per queue, which is enough for a history read every minute.
import type { QueueHistory } from "../api/types";
import type { EventFrame } from "./connection";

/** The event feed opens on this many seconds of past events (the gateway replays them). */
export const LOOK_BACK_S = 300;
export const MINUTE_MS = 60_000;
const TICK_MS = 100;
const KEEP_MS = 15 * MINUTE_MS;
const FEED_SIZE = 200;
const STARTED_REMEMBERED = 20_000;

/** What happened in a span of time, in one queue or several. */
export type Counts = {
  submitted: number;
  succeeded: number;
  retried: number; // attempts that failed with attempts left (task.retrying)
  failed: number; // tasks that ended dead, or failed with the DLQ off
  expired: number; // tasks whose TTL passed before they started
  runCount: number;
  runTotalS: number;
  runMaxS: number | null;
};

export function emptyCounts(): Counts {
  return { submitted: 0, succeeded: 0, retried: 0, failed: 0, expired: 0, runCount: 0, runTotalS: 0, runMaxS: null };
}

/** `into` plus `more` (changes `into`). */
export function addCounts(into: Counts, more: Counts): Counts {
  into.submitted += more.submitted;
  into.succeeded += more.succeeded;
  into.retried += more.retried;
  into.failed += more.failed;
  into.expired += more.expired;
  into.runCount += more.runCount;
  into.runTotalS += more.runTotalS;
  into.runMaxS = maxOf(into.runMaxS, more.runMaxS);
  return into;
}

function maxOf(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  if (b === null) return a;
  return Math.max(a, b);
}

/** The queue an event's `queue` names: a partition's events (`hot~3`) are the queue's. */
export function logicalQueue(name: string): string {
  const at = name.indexOf("~");
  return at < 0 ? name : name.slice(0, at);
}

export type Snapshot = {
  feed: EventFrame[];
  /** Changes with every event taken in (and every tick of the clock). */
  version: number;
};

/** Events taken in from the live connection: counts per 100 ms tick and queue, run times
 * measured from `task.started` to the outcome, and the feed of the latest events. */
export class LiveStats {
  private ticks = new Map<number, Map<string, Counts>>();
  private started = new Map<string, number>();
  private feed: EventFrame[] = [];
  private version = 0;
  private listeners = new Set<() => void>();
  private snapshot: Snapshot = { feed: [], version: 0 };
  private notifyScheduled = false;

  add(frame: EventFrame): void {
    const ts = frame.ts ?? Date.now() / 1000;
    const counts = () => this.counts(ts, frame.queue);
    switch (frame.type) {
      case "task.queued":
      case "task.scheduled":
        // A submit's event has no reason; a promotion, requeue or retry's return has one.
        if (frame.reason === null) counts().submitted += 1;
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
        this.ended(counts(), "succeeded", frame.task_id, ts);
        break;
      case "task.retrying":
        this.ended(counts(), "retried", frame.task_id, ts);
        break;
      case "task.dead":
      case "task.failed":
        this.ended(counts(), "failed", frame.task_id, ts);
        break;
      case "task.expired":
        counts().expired += 1;
        break;
      default:
        break;
    }
    this.feed.unshift(frame);
    if (this.feed.length > FEED_SIZE) this.feed.length = FEED_SIZE;
    this.changed();
  }

  /** The counts of the events later than `afterMs`, by the minute they fell in (its start,
   * ms), of `queue` (null: every queue). */
  byMinute(afterMs: number, queue: string | null): Map<number, Counts> {
    const out = new Map<number, Counts>();
    for (const [tick, queues] of this.ticks) {
      // A tick that straddles afterMs is left out: its events may be in the history already,
      // and none is counted twice (what it held after afterMs shows with the next read).
      if (tick * TICK_MS < afterMs) continue;
      const minute = Math.floor((tick * TICK_MS) / MINUTE_MS) * MINUTE_MS;
      for (const [name, counts] of queues) {
        if (queue !== null && name !== queue) continue;
        let into = out.get(minute);
        if (!into) {
          into = emptyCounts();
          out.set(minute, into);
        }
        addCounts(into, counts);
      }
    }
    return out;
  }

  /** Forget ticks older than a quarter of an hour; charts redraw (time moves on). */
  tick(): void {
    const oldest = Math.floor((Date.now() - KEEP_MS) / TICK_MS);
    for (const tick of this.ticks.keys()) if (tick < oldest) this.ticks.delete(tick);
    this.changed();
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  getSnapshot(): Snapshot {
    return this.snapshot;
  }

  private counts(ts: number, queue: string | null): Counts {
    const tick = Math.floor((ts * 1000) / TICK_MS);
    let queues = this.ticks.get(tick);
    if (!queues) {
      queues = new Map();
      this.ticks.set(tick, queues);
    }
    const name = logicalQueue(queue ?? "");
    let counts = queues.get(name);
    if (!counts) {
      counts = emptyCounts();
      queues.set(name, counts);
    }
    return counts;
  }

  private ended(counts: Counts, outcome: "succeeded" | "retried" | "failed", taskId: string | null, ts: number): void {
    counts[outcome] += 1;
    if (!taskId) return;
    const started = this.started.get(taskId);
    if (started === undefined) return;
    this.started.delete(taskId);
    const run = Math.max(0, ts - started);
    counts.runCount += 1;
    counts.runTotalS += run;
    counts.runMaxS = maxOf(counts.runMaxS, run);
  }

  private changed(): void {
    // Many events arrive in one message: re-render once per frame, not once per event.
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    queueMicrotask(() => {
      this.notifyScheduled = false;
      this.version += 1;
      this.snapshot = { feed: [...this.feed], version: this.version };
      for (const listener of this.listeners) listener();
    });
  }
}

/** Tasks waiting, running and delayed at one moment. */
export type Depth = { waiting: number; inFlight: number; delayed: number };

/** One value per minute, oldest first; `times` are the minutes' starts in seconds (what the
 * charts' time axis takes). */
export type Series = {
  times: number[];
  submitted: number[];
  succeeded: number[];
  retried: number[];
  /** Tasks that ended failing: dead, failed (DLQ off) and expired. */
  failed: number[];
  runCount: number[];
  runTotalS: number[];
  runMeanS: (number | null)[];
  runMaxS: (number | null)[];
  waiting: (number | null)[];
  inFlight: (number | null)[];
  delayed: (number | null)[];
};

/**
 * The history with the live counts laid on it, over as many minutes as the history has,
 * ending with the minute `nowMs` falls in (when time has moved past the history's last minute,
 * the oldest minutes drop off and new ones start empty). `current` is the depth now (the queue
 * list's): the current minute shows it, as no note of the leader does yet.
 */
export function mergeHistory(
  history: QueueHistory,
  live: Map<number, Counts>,
  nowMs: number,
  current: Depth | null = null,
): Series {
  const n = history.succeeded.length;
  const step = history.step_s * 1000;
  const lastMinute = Math.floor(nowMs / step) * step;
  const historyLast = history.start_ms + (n - 1) * step;
  const shift = Math.max(0, Math.round((lastMinute - historyLast) / step));
  const start = history.start_ms + shift * step;
  const s: Series = {
    times: [],
    submitted: [],
    succeeded: [],
    retried: [],
    failed: [],
    runCount: [],
    runTotalS: [],
    runMeanS: [],
    runMaxS: [],
    waiting: [],
    inFlight: [],
    delayed: [],
  };
  for (let i = 0; i < n; i += 1) {
    const minute = start + i * step;
    const h = i + shift; // the history's index of this minute
    const inHistory = h < n;
    const counts = emptyCounts();
    if (inHistory) {
      counts.submitted = history.submitted[h] ?? 0;
      counts.succeeded = history.succeeded[h] ?? 0;
      counts.retried = history.retried[h] ?? 0;
      counts.failed = (history.failed[h] ?? 0) + (history.expired[h] ?? 0);
      counts.runCount = history.run_count[h] ?? 0;
      counts.runTotalS = history.run_total_s[h] ?? 0;
      counts.runMaxS = history.run_max_s[h] ?? null;
    }
    const more = live.get(minute);
    if (more) addCounts(counts, { ...more, failed: more.failed + more.expired, expired: 0 });
    s.times.push(minute / 1000);
    s.submitted.push(counts.submitted);
    s.succeeded.push(counts.succeeded);
    s.retried.push(counts.retried);
    s.failed.push(counts.failed);
    s.runCount.push(counts.runCount);
    s.runTotalS.push(counts.runTotalS);
    s.runMeanS.push(counts.runCount > 0 ? counts.runTotalS / counts.runCount : null);
    s.runMaxS.push(counts.runMaxS);
    const isNow = i === n - 1 && current !== null;
    s.waiting.push(isNow ? current.waiting : inHistory ? (history.waiting[h] ?? null) : null);
    s.inFlight.push(isNow ? current.inFlight : inHistory ? (history.in_flight[h] ?? null) : null);
    s.delayed.push(isNow ? current.delayed : inHistory ? (history.delayed[h] ?? null) : null);
  }
  return s;
}

/** The last `minutes` minutes of a series (the current one included), added up. */
export type Recent = { succeeded: number; failed: number; retried: number; runMeanS: number | null; runMaxS: number | null };

export function recent(series: Series, minutes: number): Recent {
  const from = Math.max(0, series.times.length - minutes);
  const sum = (values: number[]) => values.slice(from).reduce((a, b) => a + b, 0);
  const runs = sum(series.runCount);
  const longest = series.runMaxS.slice(from).reduce<number | null>((a, b) => maxOf(a, b), null);
  return {
    succeeded: sum(series.succeeded),
    failed: sum(series.failed),
    retried: sum(series.retried),
    runMeanS: runs > 0 ? sum(series.runTotalS) / runs : null,
    runMaxS: longest,
  };
}

/** Tasks succeeded per second since the previous minute started (the current minute is only
 * partly over: a rate over it alone would jump about at each minute's start). */
export function throughput(series: Series, nowMs: number): number {
  const n = series.succeeded.length;
  if (n === 0) return 0;
  const intoMinute = (nowMs % MINUTE_MS) / 1000;
  const previous = n > 1 ? (series.succeeded[n - 2] ?? 0) : 0;
  const span = (n > 1 ? 60 : 0) + Math.max(1, intoMinute);
  return (previous + (series.succeeded[n - 1] ?? 0)) / span;
}
