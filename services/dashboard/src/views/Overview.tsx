// The overview: throughput, failures, run times and queue depth per minute over the last hour
// (or 6 h, 24 h) from the history kept in Redis, so the charts are full the moment the page
// opens, kept moving by the live events; totals across queues, workers alive, the live feed.
import { useMemo } from "react";
import { getHistory, listQueues, listWorkers } from "../api/calls";
import { keys } from "../api/query";
import { HISTORY_RANGES, type HistoryRange, type QueueStats } from "../api/types";
import { EventFeed } from "../components/EventFeed";
import { TimeChart } from "../components/TimeChart";
import { Empty, ErrorBox, Loaded, Loading } from "../components/ui";
import { count, duration, rate } from "../format";
import { useLiveStats, useLiveStatsSource, useNow, useResource } from "../live/context";
import { type Depth, mergeHistory, recent, throughput } from "../live/stats";
import { Link, setQuery, useLocation } from "../router";

const QUEUE_EVENTS = (type: string) => type.startsWith("task.") || type.startsWith("queue.");
const RANGE_LABELS: Record<HistoryRange, string> = { "1h": "1 hour", "6h": "6 hours", "24h": "24 hours" };
/** The history is read again this often: the leader notes depths once a minute. */
const HISTORY_EVERY_MS = 60_000;

function perMinute(v: number): string {
  return v >= 100 ? count(v) : v >= 10 ? v.toFixed(0) : Number.isInteger(v) ? String(v) : v.toFixed(1);
}

function depthNow(queues: QueueStats[] | undefined, queue: string | null): Depth | null {
  if (!queues) return null;
  const picked = queue ? queues.filter((q) => q.name === queue) : queues;
  return {
    waiting: picked.reduce((n, x) => n + x.depth + (x.waiting_in_groups ?? 0), 0),
    inFlight: picked.reduce((n, x) => n + x.in_flight, 0),
    delayed: picked.reduce((n, x) => n + x.delayed, 0),
  };
}

export function Overview() {
  const { query } = useLocation();
  const range = (HISTORY_RANGES as readonly string[]).includes(query.get("range") ?? "")
    ? (query.get("range") as HistoryRange)
    : "1h";
  const queue = query.get("queue") || null;
  const stats = useLiveStats();
  const source = useLiveStatsSource();
  const now = useNow();
  const queues = useResource(keys.queues(), listQueues, { match: (f) => QUEUE_EVENTS(f.type), debounceMs: 1000 });
  const workers = useResource(keys.workers(), listWorkers, {
    match: (f) => f.type === "worker.stale" || f.type === "task.started",
    debounceMs: 2000,
    // Heartbeats are not events: a worker that stops beating is only seen by reading again.
    intervalMs: 10_000,
  });
  const history = useResource(keys.history(range, queue), () => getHistory(range, queue), {
    keepPrevious: true,
    // Counts move with the events; depths and what other pages missed come with each read.
    intervalMs: HISTORY_EVERY_MS,
  });

  const h = history.data;
  const current = depthNow(queues.data, queue);
  const series = useMemo(
    () => (h ? mergeHistory(h, source.byMinute(h.as_of_ms, queue), now, current) : null),
    // stats.version: the live counts changed; now (every 5 s): the minutes move on.
    [h, stats.version, now - (now % 5000), queue, current?.waiting, current?.inFlight, current?.delayed],
  );
  const last5 = series ? recent(series, 5) : null;

  const q = queues.data ?? [];
  const shownQueues = queue ? q.filter((x) => x.name === queue) : q;
  const delayed = shownQueues.reduce((n, x) => n + x.delayed, 0);
  const dead = shownQueues.reduce((n, x) => n + x.dead, 0);
  const w = workers.data ?? [];
  const alive = w.filter((x) => x.state !== "stale").length;
  const span = RANGE_LABELS[range];

  return (
    <section aria-labelledby="overview-title">
      <h1 id="overview-title">Overview</h1>
      <form className="filters" aria-label="What the charts show" onSubmit={(e) => e.preventDefault()}>
        <fieldset className="segmented">
          <legend>Range</legend>
          {HISTORY_RANGES.map((r) => (
            <label key={r} className={r === range ? "checked" : undefined}>
              <input
                type="radio"
                name="range"
                value={r}
                checked={r === range}
                onChange={() => setQuery({ range: r === "1h" ? null : r })}
              />
              {RANGE_LABELS[r]}
            </label>
          ))}
        </fieldset>
        <label>
          Queue
          <select name="queue" value={queue ?? ""} onChange={(e) => setQuery({ queue: e.target.value || null })}>
            <option value="">All queues</option>
            {q.map((x) => (
              <option key={x.name} value={x.name}>
                {x.name}
              </option>
            ))}
          </select>
        </label>
      </form>

      <div className="cards">
        <Card
          label="Throughput"
          value={series ? rate(throughput(series, now)) : "–"}
          hint="tasks succeeded, since the last minute began"
        />
        <Card
          label="Run time, last 5 min"
          value={duration(last5?.runMeanS ?? null)}
          hint={last5?.runMaxS !== null && last5 ? `mean · longest ${duration(last5.runMaxS)}` : "mean · no run ended"}
        />
        <Card
          label="Waiting"
          value={current ? count(current.waiting) : "–"}
          hint={`${count(delayed)} delayed`}
          to="/queues"
        />
        <Card label="In flight" value={current ? count(current.inFlight) : "–"} hint="running now" />
        <Card
          label="Failed, last 5 min"
          value={last5 ? count(last5.failed) : "–"}
          hint={`tasks dead, failed or expired · ${count(last5?.retried ?? 0)} attempts retried · ${count(dead)} in dead letters`}
          to="/dlq"
          alert={(last5?.failed ?? 0) > 0}
        />
        <Card
          label="Workers alive"
          value={workers.data ? `${count(alive)} / ${count(w.length)}` : "–"}
          hint={w.length - alive > 0 ? `${w.length - alive} stale` : "all heartbeating"}
          to="/workers"
          alert={workers.data !== undefined && alive === 0}
        />
      </div>

      {history.error !== undefined && !h ? (
        <ErrorBox error={history.error} retry={history.reload} what="the history" />
      ) : !series ? (
        <Loading what="the history" />
      ) : (
        <div className="charts" aria-busy={history.stale} data-range={range}>
          <TimeChart
            title="Throughput"
            unit="tasks per minute"
            times={series.times}
            format={perMinute}
            whole
            summary={`Over the last ${span}: ${count(sum(series.succeeded))} succeeded, ${count(sum(series.failed))} failed, ${count(sum(series.retried))} retried, ${count(sum(series.submitted))} submitted.`}
            series={[
              { label: "succeeded", tone: "ok", pattern: "solid", values: series.succeeded },
              { label: "failed", tone: "bad", pattern: "dashed", values: series.failed },
              { label: "retried", tone: "warn", pattern: "dotted", values: series.retried },
              { label: "submitted", tone: "info", pattern: "dashdot", values: series.submitted },
            ]}
          />
          <TimeChart
            title="Run time"
            unit="seconds, per minute"
            times={series.times}
            format={(v) => duration(v)}
            summary={`Over the last ${span}: ${count(sum(series.runCount))} runs ended; the longest took ${duration(max(series.runMaxS))}.`}
            series={[
              { label: "mean", tone: "info", pattern: "solid", values: series.runMeanS },
              { label: "longest", tone: "warn", pattern: "dashed", values: series.runMaxS },
            ]}
          />
          <TimeChart
            title="Queue depth"
            unit="tasks, once a minute"
            times={series.times}
            format={perMinute}
            whole
            summary={`Now: ${count(current?.waiting ?? null)} waiting, ${count(current?.inFlight ?? null)} in flight, ${count(current?.delayed ?? null)} delayed.`}
            series={[
              { label: "waiting", tone: "info", pattern: "solid", values: series.waiting },
              { label: "in flight", tone: "ok", pattern: "dashed", values: series.inFlight },
              { label: "delayed", tone: "muted", pattern: "dotted", values: series.delayed },
            ]}
          />
        </div>
      )}
      <p className="hint">
        Per minute over the last {span}, from the history dtq keeps in Redis for a day, and the live events since it was
        read; the depths are noted once a minute by the scheduler leader.
      </p>

      <div className="split">
        <section aria-labelledby="depths-title" className="panel">
          <h2 id="depths-title">Queue depths</h2>
          <Loaded
            resource={queues}
            what="queues"
            empty={() =>
              q.length === 0 && (
                <Empty title="No queues yet">
                  A queue appears when a worker serving it starts, or when an operator creates it (
                  <code>dtq queue create</code>).
                </Empty>
              )
            }
          >
            {() => (
              <div className="table-wrap">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">Queue</th>
                      <th scope="col" className="num">Waiting</th>
                      <th scope="col" className="num">In flight</th>
                      <th scope="col" className="num">Delayed</th>
                      <th scope="col" className="num">Dead</th>
                    </tr>
                  </thead>
                  <tbody>
                    {q.map((x) => (
                      <tr key={x.name} data-queue={x.name}>
                        <th scope="row">
                          <Link to={`/tasks?queue=${encodeURIComponent(x.name)}`}>{x.name}</Link>
                          {x.paused && <span className="badge paused">paused</span>}
                        </th>
                        <td className="num">{count(x.depth)}</td>
                        <td className="num">{count(x.in_flight)}</td>
                        <td className="num">{count(x.delayed)}</td>
                        <td className="num">
                          {x.dead ? <Link to={`/dlq?queue=${encodeURIComponent(x.name)}`}>{count(x.dead)}</Link> : "0"}
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
            )}
          </Loaded>
        </section>
        <section aria-labelledby="feed-title" className="panel">
          <h2 id="feed-title">Live events</h2>
          <EventFeed frames={stats.feed} limit={40} />
        </section>
      </div>
    </section>
  );
}

function sum(values: number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

function max(values: (number | null)[]): number | null {
  return values.reduce<number | null>((a, b) => (b === null ? a : a === null ? b : Math.max(a, b)), null);
}

function Card({ label, value, hint, to, alert }: { label: string; value: string; hint: string; to?: string; alert?: boolean }) {
  const body = (
    <>
      <span className="card-label">{label}</span>
      <span className="card-value">{value}</span>
      <span className="card-hint">{hint}</span>
    </>
  );
  return to ? (
    <Link to={to} className={`card${alert ? " card-alert" : ""}`}>
      {body}
    </Link>
  ) : (
    <div className={`card${alert ? " card-alert" : ""}`}>{body}</div>
  );
}
