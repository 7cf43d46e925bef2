// The overview: throughput and run-time charts from the live events, totals across queues,
// workers alive, and the live event feed.
import { listQueues, listWorkers } from "../api/calls";
import { LineChart } from "../components/Chart";
import { EventFeed } from "../components/EventFeed";
import { Empty, Loaded } from "../components/ui";
import { count, duration, rate } from "../format";
import { useLiveStats, useResource } from "../live/context";
import { BUCKET_S, percentile } from "../live/stats";
import { Link } from "../router";

const QUEUE_EVENTS = (type: string) => type.startsWith("task.") || type.startsWith("queue.");

export function Overview() {
  const stats = useLiveStats();
  const queues = useResource("queues", listQueues, { match: (f) => QUEUE_EVENTS(f.type), debounceMs: 1000 });
  const workers = useResource("workers", listWorkers, {
    match: (f) => f.type === "worker.stale" || f.type === "task.started",
    debounceMs: 2000,
    // Heartbeats are not events: a worker that stops beating is only seen by reading again.
    intervalMs: 10_000,
  });

  const buckets = stats.buckets;
  const lastMinute = buckets.slice(-60 / BUCKET_S);
  const done = lastMinute.reduce((n, b) => n + b.succeeded, 0);
  const failedRecent = buckets.reduce((n, b) => n + b.failed, 0);
  const retriedRecent = buckets.reduce((n, b) => n + b.retried, 0);
  const runTimes = lastMinute.flatMap((b) => b.runTimes);
  const p95 = percentile(runTimes, 95);

  const q = queues.data ?? [];
  const waiting = q.reduce((n, x) => n + x.depth, 0);
  const inFlight = q.reduce((n, x) => n + x.in_flight, 0);
  const delayed = q.reduce((n, x) => n + x.delayed, 0);
  const dead = q.reduce((n, x) => n + x.dead, 0);
  const w = workers.data ?? [];
  const alive = w.filter((x) => x.state !== "stale").length;

  return (
    <section aria-labelledby="overview-title">
      <h1 id="overview-title">Overview</h1>
      <div className="cards">
        <Card label="Throughput" value={rate(done / 60)} hint="tasks finished, last minute" />
        <Card label="Run time p95" value={duration(p95)} hint={`${count(runTimes.length)} runs, last minute`} />
        <Card label="Waiting" value={queues.data ? count(waiting) : "–"} hint={`${count(delayed)} delayed`} to="/queues" />
        <Card label="In flight" value={queues.data ? count(inFlight) : "–"} hint="running now" />
        <Card
          label="Failed, last 5 min"
          value={count(failedRecent)}
          hint={`tasks dead, failed or expired · ${count(retriedRecent)} attempts retried · ${count(dead)} in dead letters`}
          to="/dlq"
          alert={failedRecent > 0}
        />
        <Card
          label="Workers alive"
          value={workers.data ? `${count(alive)} / ${count(w.length)}` : "–"}
          hint={w.length - alive > 0 ? `${w.length - alive} stale` : "all heartbeating"}
          to="/workers"
          alert={workers.data !== undefined && alive === 0}
        />
      </div>

      <div className="charts">
        <LineChart
          title="Throughput (tasks/s)"
          unit="tasks per second"
          start={buckets[0]?.start ?? 0}
          stepS={BUCKET_S}
          format={(v) => (v >= 10 ? v.toFixed(0) : v.toFixed(1))}
          series={[
            { name: "succeeded", className: "s-ok", values: buckets.map((b) => b.succeeded / BUCKET_S) },
            { name: "failed", className: "s-bad", values: buckets.map((b) => b.failed / BUCKET_S) },
            { name: "retried", className: "s-warn", values: buckets.map((b) => b.retried / BUCKET_S) },
            { name: "submitted", className: "s-info", values: buckets.map((b) => b.submitted / BUCKET_S) },
          ]}
        />
        <LineChart
          title="Run time (started → outcome)"
          unit="seconds"
          start={buckets[0]?.start ?? 0}
          stepS={BUCKET_S}
          format={(v) => duration(v)}
          series={[
            { name: "p50", className: "s-info", values: buckets.map((b) => percentile(b.runTimes, 50)) },
            { name: "p95", className: "s-warn", values: buckets.map((b) => percentile(b.runTimes, 95)) },
          ]}
        />
      </div>
      <p className="hint">Charts are drawn from the live events received since this page opened.</p>

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
