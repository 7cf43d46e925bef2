// Workers: id, host, queues, concurrency, in flight, processed, heartbeat age, state; a worker
// of several processes (dtq-worker --processes N) gets a line per process under its own.
import { listWorkers } from "../api/calls";
import { keys } from "../api/query";
import { Empty, Meter, RelTime, Loaded } from "../components/ui";
import { count, duration } from "../format";
import { useNow, useResource } from "../live/context";

export function WorkersView() {
  // Heartbeats are not events, so the registry is also re-read every 5 s; claims, outcomes
  // and stale workers are events and refresh it sooner.
  const workers = useResource(keys.workers(), listWorkers, {
    match: (f) => f.type === "worker.stale" || f.type === "task.started" || f.type === "task.succeeded",
    debounceMs: 1500,
    intervalMs: 5000,
  });
  const now = useNow();
  const loadedAt = useLoadedAt(workers.data);

  return (
    <section aria-labelledby="workers-title">
      <h1 id="workers-title">Workers</h1>
      <Loaded
        resource={workers}
        what="workers"
        empty={() =>
          (workers.data ?? []).length === 0 && (
            <Empty title="No worker is running">
              Start one with <code>dtq-worker --app yourapp.tasks:registry --queues default</code> (or <code>just up</code>); it
              appears here with its first heartbeat.
            </Empty>
          )
        }
      >
        {() => (
          // Focusable: a table wider than the screen scrolls by keyboard too (nothing in it takes focus).
          <div className="table-wrap" tabIndex={0} role="region" aria-label="Workers table, scrolls sideways">
            <table className="workers">
              <thead>
                <tr>
                  <th scope="col">Worker</th>
                  <th scope="col">Host</th>
                  <th scope="col">Queues</th>
                  <th scope="col">In flight</th>
                  <th scope="col" className="num">Processed</th>
                  <th scope="col" className="num">Failed</th>
                  <th scope="col" className="num">Heartbeat</th>
                  <th scope="col">State</th>
                  <th scope="col">Processes</th>
                  <th scope="col">Up since</th>
                </tr>
              </thead>
              <tbody>
                {(workers.data ?? []).flatMap((w) => {
                  const since = Math.max(0, (now - loadedAt) / 1000);
                  const age = w.heartbeat_age_s + since;
                  const processes = w.processes ?? [];
                  const live = processes.filter((p) => p.state !== "stale").length;
                  const slots = w.process_slots ?? 1;
                  const several = slots > 1 || processes.length > 1;
                  const rows = [
                    <tr key={w.id} data-worker={w.id} data-state={w.state}>
                      <th scope="row" className="mono">
                        {w.id}
                      </th>
                      <td>
                        {w.host ?? "–"}
                        {w.pid ? <span className="muted"> · pid {w.pid}</span> : null}
                      </td>
                      <td>{w.queues.join(", ")}</td>
                      <td className="inflight">
                        <Meter value={w.in_flight} max={w.concurrency} label={`in flight of ${w.concurrency}`} />
                        <span>
                          {count(w.in_flight)} / {count(w.concurrency)}
                        </span>
                      </td>
                      <td className="num">{count(w.processed)}</td>
                      <td className="num">{count(w.failed)}</td>
                      <td className={`num${age > 15 ? " warn" : ""}`}>{duration(age)} ago</td>
                      <td>
                        <span className={`badge worker-${w.state}`}>{w.state}</span>
                      </td>
                      <td className={`processes${live < slots ? " warn" : ""}`}>
                        {live} / {slots}
                      </td>
                      <td>
                        <RelTime at={w.started_at} />
                        {w.version && <span className="muted"> · v{w.version}</span>}
                      </td>
                    </tr>,
                  ];
                  if (several) {
                    for (const p of processes) {
                      const pAge = p.heartbeat_age_s + since;
                      rows.push(
                        <tr key={p.id} className="process" data-process={p.id} data-state={p.state}>
                          <th scope="row" className="mono">
                            <span className="muted">└ </span>
                            {p.id.startsWith(w.id) ? p.id.slice(w.id.length) : p.id}
                          </th>
                          <td>{p.pid ? <span className="muted">pid {p.pid}</span> : "–"}</td>
                          <td className="muted">{p.handler_processes ? `${p.handler_processes} handler processes` : ""}</td>
                          <td className="inflight">
                            {count(p.in_flight)} / {count(p.concurrency)}
                          </td>
                          <td className="num">{count(p.processed)}</td>
                          <td className="num">{count(p.failed)}</td>
                          <td className={`num${pAge > 15 ? " warn" : ""}`}>{duration(pAge)} ago</td>
                          <td>
                            <span className={`badge worker-${p.state}`}>{p.state}</span>
                          </td>
                          <td className="muted">{p.restarts ? `restarted ${count(p.restarts)}×` : ""}</td>
                          <td>
                            <RelTime at={p.started_at} />
                          </td>
                        </tr>,
                      );
                    }
                  }
                  return rows;
                })}
              </tbody>
            </table>
          </div>
        )}
      </Loaded>
    </section>
  );
}

const loadedTimes = new WeakMap<object, number>();

/** When this data arrived (heartbeat ages are as of that moment). */
function useLoadedAt(data: object | undefined): number {
  if (!data) return Date.now();
  let at = loadedTimes.get(data);
  if (at === undefined) {
    at = Date.now();
    loadedTimes.set(data, at);
  }
  return at;
}
