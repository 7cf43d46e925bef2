// Queues: depth per priority, delayed, in flight, dead, oldest waiting age, limits, groups;
// pause, resume, purge (with confirmation) and the limits (concurrency, rate, depth, and the
// per-group concurrency and rate).
import { useState } from "react";
import { configureQueue, listQueues, pauseQueue, purgeQueue, resumeQueue, type QueueLimits } from "../api/calls";
import { keys } from "../api/query";
import type { QueueStats } from "../api/types";
import { useAuth } from "../auth";
import { ConfirmDialog, Empty, useAction, Loaded } from "../components/ui";
import { count, duration } from "../format";
import { useResource } from "../live/context";
import { Link } from "../router";
import { groupsPath } from "./Groups";

const PRIORITIES = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0];

export function QueuesView() {
  const { can } = useAuth();
  const admin = can("admin");
  const queues = useResource(keys.queues(), listQueues, {
    match: (f) => f.type.startsWith("task.") || f.type.startsWith("queue."),
    debounceMs: 700,
  });
  const { busy, run } = useAction();
  const [purging, setPurging] = useState<QueueStats | null>(null);
  const [limiting, setLimiting] = useState<QueueStats | null>(null);
  const [limits, setLimits] = useState<Record<keyof QueueLimits, string>>({
    concurrency: "",
    rate: "",
    burst: "",
    max_depth: "",
    group_concurrency: "",
    group_rate: "",
  });
  const editLimits = (q: QueueStats) => {
    setLimits({
      concurrency: q.concurrency?.toString() ?? "",
      rate: q.rate ?? "",
      burst: q.burst?.toString() ?? "",
      max_depth: q.max_depth?.toString() ?? "",
      group_concurrency: q.group_concurrency?.toString() ?? "",
      group_rate: q.group_rate ?? "",
    });
    setLimiting(q);
  };
  const limitsBody = (): QueueLimits => {
    // A value that is not a whole number goes as written: the API's 422 names it.
    const num = (v: string) => {
      const text = v.trim();
      if (text === "") return null;
      return Number.isInteger(Number(text)) ? Number(text) : (text as unknown as number);
    };
    const text = (v: string) => (v.trim() === "" ? null : v.trim());
    return {
      concurrency: num(limits.concurrency),
      rate: text(limits.rate),
      burst: num(limits.burst),
      max_depth: num(limits.max_depth),
      group_concurrency: num(limits.group_concurrency),
      group_rate: text(limits.group_rate),
    };
  };

  const act = async (name: string, action: () => Promise<string>) => {
    await run(name, action);
    queues.reload();
  };

  return (
    <section aria-labelledby="queues-title">
      <h1 id="queues-title">Queues</h1>
      {!admin && <p className="hint">Your key is read-only: pausing and purging need the admin scope.</p>}
      <Loaded
        resource={queues}
        what="queues"
        empty={() =>
          (queues.data ?? []).length === 0 && (
            <Empty title="No queues yet">
              A queue appears when a worker serving it starts (<code>dtq-worker --queues ...</code>), or when an
              operator creates it (<code>POST /api/v1/queues</code> or <code>dtq queue create</code>).
            </Empty>
          )
        }
      >
        {() => (
          <div className="table-wrap">
            <table className="queues">
              <thead>
                <tr>
                  <th scope="col">Queue</th>
                  <th scope="col" className="num">Waiting</th>
                  <th scope="col">By priority (p9 → p0)</th>
                  <th scope="col" className="num">Delayed</th>
                  <th scope="col" className="num">In flight</th>
                  <th scope="col" className="num">Dead</th>
                  <th scope="col" className="num">Oldest waiting</th>
                  {admin && <th scope="col">Actions</th>}
                </tr>
              </thead>
              <tbody>
                {(queues.data ?? []).map((q) => (
                  <tr key={q.name} data-queue={q.name}>
                    <th scope="row">
                      <Link to={`/tasks?queue=${encodeURIComponent(q.name)}`}>{q.name}</Link>
                      {q.paused && <span className="badge paused">paused</span>}
                      {(q.partitions ?? 1) > 1 && (
                        <span
                          className="badge partitions"
                          title={`Waiting by partition: ${(q.depth_by_partition ?? []).map((d, i) => `#${i} ${d}`).join(", ")}`}
                        >
                          {q.partitions} partitions
                        </span>
                      )}
                      {q.concurrency != null && (
                        <span className="badge limit" data-limit="concurrency" title="Tasks running at once, all workers">
                          ≤ {count(q.concurrency)} running
                        </span>
                      )}
                      {q.rate != null && (
                        <span className="badge limit" data-limit="rate" title="Tasks started per period, all workers">
                          {q.rate}
                        </span>
                      )}
                      {q.group_concurrency != null && (
                        <span className="badge limit" data-limit="group_concurrency" title="Tasks of one group running at once, all workers">
                          ≤ {count(q.group_concurrency)} running per group
                        </span>
                      )}
                      {q.group_rate != null && (
                        <span className="badge limit" data-limit="group_rate" title="Tasks of one group started per period, all workers">
                          {q.group_rate} per group
                        </span>
                      )}
                      <Link
                        className="badge groups"
                        to={groupsPath(q.name)}
                        title={`The groups of ${q.name}: those holding tasks, paused or given a weight`}
                      >
                        {(q.groups ?? 0) > 0 ? `${count(q.groups)} ${q.groups === 1 ? "group" : "groups"}` : "groups"}
                      </Link>
                      {(q.waiting_in_groups ?? 0) > 0 && (
                        <span className="badge group-waiting" title="Tasks waiting in their group for its turn or its limits">
                          {count(q.waiting_in_groups)} waiting in groups
                        </span>
                      )}
                    </th>
                    <td className="num">{count(q.depth)}</td>
                    <td>
                      <PriorityBars queue={q} />
                    </td>
                    <td className="num">{count(q.delayed)}</td>
                    <td className="num">{count(q.in_flight)}</td>
                    <td className="num">
                      {q.dead ? <Link to={`/dlq?queue=${encodeURIComponent(q.name)}`}>{count(q.dead)}</Link> : "0"}
                    </td>
                    <td className="num">{q.oldest_waiting_age_s === null ? "–" : duration(q.oldest_waiting_age_s)}</td>
                    {admin && (
                      <td className="actions">
                        {q.paused ? (
                          <button
                            type="button"
                            disabled={busy !== null}
                            onClick={() => void act(`Resume ${q.name}`, async () => (await resumeQueue(q.name), `Queue ${q.name} resumed`))}
                          >
                            Resume
                          </button>
                        ) : (
                          <button
                            type="button"
                            disabled={busy !== null}
                            onClick={() => void act(`Pause ${q.name}`, async () => (await pauseQueue(q.name), `Queue ${q.name} paused`))}
                          >
                            Pause
                          </button>
                        )}
                        <button type="button" disabled={busy !== null} onClick={() => editLimits(q)}>
                          Limits…
                        </button>
                        <button type="button" className="danger" disabled={busy !== null} onClick={() => setPurging(q)}>
                          Purge…
                        </button>
                      </td>
                    )}
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Loaded>
      {limiting !== null && (
      <ConfirmDialog
        open
        title={`Limits of queue ${limiting?.name ?? ""}`}
        confirmLabel="Save limits"
        onCancel={() => setLimiting(null)}
        onConfirm={() => {
          const q = limiting;
          setLimiting(null);
          if (q) void act(`Limits of ${q.name}`, async () => (await configureQueue(q.name, limitsBody()), `Limits of ${q.name} saved`));
        }}
      >
        <p className="hint">Across every worker; empty means no limit (docs/flow-control.md).</p>
        <form className="limits" onSubmit={(e) => e.preventDefault()}>
          <label>
            Running at once
            <input name="concurrency" inputMode="numeric" value={limits.concurrency} onChange={(e) => setLimits({ ...limits, concurrency: e.target.value })} />
          </label>
          <label>
            Rate (100/s, 6000/m)
            <input name="rate" value={limits.rate} onChange={(e) => setLimits({ ...limits, rate: e.target.value })} />
          </label>
          <label>
            Burst
            <input name="burst" inputMode="numeric" value={limits.burst} onChange={(e) => setLimits({ ...limits, burst: e.target.value })} />
          </label>
          <label>
            Waiting at most (empty: DTQ_MAX_QUEUE_DEPTH)
            <input name="max_depth" inputMode="numeric" value={limits.max_depth} onChange={(e) => setLimits({ ...limits, max_depth: e.target.value })} />
          </label>
          <label>
            Running at once, per group
            <input name="group_concurrency" inputMode="numeric" value={limits.group_concurrency} onChange={(e) => setLimits({ ...limits, group_concurrency: e.target.value })} />
          </label>
          <label>
            Rate per group (10/s, 600/m)
            <input name="group_rate" value={limits.group_rate} onChange={(e) => setLimits({ ...limits, group_rate: e.target.value })} />
          </label>
        </form>
      </ConfirmDialog>
      )}
      <ConfirmDialog
        open={purging !== null}
        title={`Purge queue ${purging?.name ?? ""}?`}
        confirmLabel="Purge waiting tasks"
        danger
        onCancel={() => setPurging(null)}
        onConfirm={() => {
          const q = purging;
          setPurging(null);
          if (q) void act(`Purge ${q.name}`, async () => `Purged ${count((await purgeQueue(q.name)).count)} tasks from ${q.name}`);
        }}
      >
        <p>
          Every waiting task of <strong>{purging?.name}</strong> (about {count((purging?.depth ?? 0) + (purging?.delayed ?? 0))}{" "}
          queued, scheduled or retrying) becomes <em>cancelled</em>. Running tasks finish. This cannot be undone.
        </p>
      </ConfirmDialog>
    </section>
  );
}

function PriorityBars({ queue }: { queue: QueueStats }) {
  const values = PRIORITIES.map((p) => queue.depth_by_priority[String(p)] ?? 0);
  const max = Math.max(1, ...values);
  const label = PRIORITIES.map((p, i) => `p${p}: ${values[i] ?? 0}`).join(", ");
  return (
    <span className="prio" role="img" aria-label={label} title={label}>
      {values.map((v, i) => (
        <span key={PRIORITIES[i]} className={`prio-bar${v ? "" : " prio-empty"}`} style={{ height: `${Math.max(8, (v / max) * 100)}%` }} />
      ))}
    </span>
  );
}
