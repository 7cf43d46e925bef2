// One task: arguments, result or the error of every attempt, progress, a timeline of its
// events (from its record, then live), its trace (a link when DTQ_TRACE_URL is set), cancel
// and retry.
import { useState } from "react";
import { cancelTask, getTask, retryTask } from "../api/calls";
import { keys } from "../api/query";
import { ApiError } from "../api/client";
import { CANCELLABLE, RETRYABLE, type Task } from "../api/types";
import { useAuth } from "../auth";
import { Empty, ErrorBox, Loading, Meter, RelTime, StatusBadge, useAction } from "../components/ui";
import { absolute, count, duration, json, percent, toMs } from "../format";
import type { EventFrame } from "../live/connection";
import { useLiveEvents, useResource } from "../live/context";
import { Link, workflowPath } from "../router";
import { groupsPath } from "./Groups";

const WAITING: Record<string, string> = {
  scheduled: "scheduled",
  queue_paused: "its queue is paused",
  rate_limited: "its queue's rate limit",
  queue_concurrency_full: "its queue's concurrency limit is reached",
  group_paused: "its group is paused",
  group_concurrency_full: "its group's concurrency limit is reached",
  group_rate_limited: "its group's rate limit",
  group_turn: "its group's earlier tasks go first",
  ready: "ready, for the next worker with room",
};

type Moment = { at: number; label: string; detail?: string; live?: boolean };

function recordMoments(task: Task): Moment[] {
  const moments: Moment[] = [{ at: Date.parse(task.created_at), label: "submitted", detail: `queue ${task.queue}, priority ${task.priority}` }];
  if (task.scheduled_for) moments.push({ at: Date.parse(task.scheduled_for), label: "due", detail: "delayed until then" });
  for (const e of task.errors ?? []) {
    if (e.ts) moments.push({ at: toMs(e.ts), label: `attempt ${e.attempt} failed`, detail: `${e.type}: ${e.message}` });
  }
  if (task.started_at) moments.push({ at: Date.parse(task.started_at), label: `attempt ${task.attempts} started`, detail: task.worker ? `on ${task.worker}` : undefined });
  if (task.finished_at) {
    // The outcome comes after the failure that caused it, even when the worker's clock (error
    // times) runs slightly ahead of Redis's (finished_at).
    const lastError = Math.max(...(task.errors ?? []).map((e) => toMs(e.ts ?? null)).filter((n) => !Number.isNaN(n)));
    moments.push({ at: Math.max(Date.parse(task.finished_at), lastError), label: task.status });
  }
  return moments.filter((m) => !Number.isNaN(m.at));
}

function eventMoment(f: EventFrame): Moment {
  const parts = [
    f.attempt ? `attempt ${f.attempt}` : "",
    f.worker ? `on ${f.worker}` : "",
    f.reason ?? "",
    typeof f.data?.progress === "object" && f.data.progress !== null
      ? `progress ${percent(Number((f.data.progress as { value?: number }).value ?? 0))}`
      : "",
  ].filter(Boolean);
  return { at: (f.ts ?? Date.now() / 1000) * 1000, label: f.type, detail: parts.join(" · ") || undefined, live: true };
}

export function TaskDetail({ id }: { id: string }) {
  const { can } = useAuth();
  const [live, setLive] = useState<Moment[]>([]);
  const task = useResource(keys.task(id), () => getTask(id), {
    match: (f) => f.task_id === id,
    debounceMs: 250,
  });
  const { busy, run } = useAction();

  useLiveEvents((f) => {
    if (f.task_id === id) setLive((all) => [...all, eventMoment(f)]);
  });

  if (task.error !== undefined && !task.data) {
    if (task.error instanceof ApiError && task.error.status === 404) {
      return (
        <section>
          <h1>Task not found</h1>
          <Empty title={`No task has the id ${id}`}>
            Its record may have expired (results are kept for <code>DTQ_RESULT_RETENTION_S</code>, other outcomes for{" "}
            <code>DTQ_TASK_RETENTION_S</code>), or the id is mistyped. <Link to="/tasks">Browse the tasks</Link>.
          </Empty>
        </section>
      );
    }
    return <ErrorBox error={task.error} retry={task.reload} what={`task ${id}`} />;
  }
  if (!task.data) return <Loading what="the task" />;
  const t = task.data;
  const timeline = [...recordMoments(t), ...live].sort((a, b) => a.at - b.at);
  const admin = can("admin");
  const runTime = t.started_at && t.finished_at ? (Date.parse(t.finished_at) - Date.parse(t.started_at)) / 1000 : null;

  const act = async (name: string, action: () => Promise<{ status: string }>) => {
    await run(name, async () => `${name}: the task is now ${(await action()).status}`);
    task.reload();
  };

  return (
    <section aria-labelledby="task-title" className="task-detail">
      <p className="crumbs">
        <Link to="/tasks">Tasks</Link> / <Link to={`/tasks?queue=${encodeURIComponent(t.queue)}`}>{t.queue}</Link>
      </p>
      <h1 id="task-title">
        {t.task} <StatusBadge status={t.status} />
      </h1>
      <p className="mono muted id-line">{t.id}</p>
      {t.workflow_id && (
        <p className="workflow-line" data-fact="workflow">
          <Link to={workflowPath(t.workflow_id)}>
            step {t.workflow_step ?? "?"} of workflow <span className="mono">{t.workflow_id}</span>
          </Link>
        </p>
      )}
      {t.children_workflow_id && (
        <p className="children-line" data-fact="children">
          <Link to={workflowPath(t.children_workflow_id)}>children</Link>{" "}
          <span className="muted">
            (the tasks its handler spawned: workflow <span className="mono">{t.children_workflow_id}</span>)
          </span>
        </p>
      )}
      {t.waiting && (
        <p className="waiting" data-reason={t.waiting.reason}>
          Waiting: {WAITING[t.waiting.reason] ?? t.waiting.reason}
          {t.waiting.detail ? ` (${t.waiting.detail})` : ""}
          {t.waiting.until ? (
            <>
              {" "}until <RelTime at={t.waiting.until} />
            </>
          ) : null}
        </p>
      )}
      {admin && (
        <div className="actions">
          <button type="button" disabled={!CANCELLABLE.has(t.status) || busy !== null || t.cancel_requested} onClick={() => void act("Cancel", () => cancelTask(t.id))}>
            {t.cancel_requested && t.status === "running" ? "Cancel requested" : "Cancel"}
          </button>
          <button type="button" className="primary" disabled={!RETRYABLE.has(t.status) || busy !== null} onClick={() => void act("Retry", () => retryTask(t.id))}>
            Retry
          </button>
        </div>
      )}

      <dl className="facts">
        <div><dt>Queue</dt><dd>{t.queue}</dd></div>
        {t.group != null && (
          <div data-fact="group">
            <dt>Group</dt>
            <dd>
              <Link to={groupsPath(t.queue)} className="mono">{t.group}</Link>
            </dd>
          </div>
        )}
        <div><dt>Priority</dt><dd>{t.priority}</dd></div>
        <div><dt>Attempts</dt><dd>{count(t.attempts)}{t.max_attempts ? ` of ${count(t.max_attempts)}` : ""}</dd></div>
        <div><dt>Created</dt><dd><RelTime at={t.created_at} /></dd></div>
        <div><dt>Started</dt><dd><RelTime at={t.started_at} /></dd></div>
        <div><dt>Finished</dt><dd><RelTime at={t.finished_at} /></dd></div>
        <div><dt>Run time</dt><dd>{duration(runTime)}</dd></div>
        <div><dt>Timeout</dt><dd>{duration(t.timeout_s)}</dd></div>
        <div><dt>Worker</dt><dd>{t.worker ?? "–"}</dd></div>
        {t.trace_id && (
          <div data-fact="trace">
            <dt>Trace</dt>
            <dd>
              {t.trace_url ? (
                <a href={t.trace_url} target="_blank" rel="noopener noreferrer" className="mono trace-id" title="Open the trace in the trace viewer">
                  {t.trace_id}
                </a>
              ) : (
                <span className="mono trace-id" title="DTQ_TRACE_URL on the API links this to your trace viewer">
                  {t.trace_id}
                </span>
              )}
            </dd>
          </div>
        )}
      </dl>

      {t.progress && (
        <div className="progress">
          <span>Progress {percent(t.progress.value)}</span>
          <Meter value={t.progress.value} max={1} label="progress" />
          {t.progress.message && <span className="muted">{t.progress.message}</span>}
        </div>
      )}

      <div className="split">
        <section className="panel" aria-labelledby="args-title">
          <h2 id="args-title">Arguments</h2>
          <h3>args</h3>
          <pre className="json">{json(t.args ?? [])}</pre>
          <h3>kwargs</h3>
          <pre className="json">{json(t.kwargs ?? {})}</pre>
          {t.metadata && (
            <>
              <h3>metadata</h3>
              <pre className="json">{json(t.metadata)}</pre>
            </>
          )}
        </section>
        <section className="panel" aria-labelledby="result-title">
          <h2 id="result-title">Result</h2>
          {t.status === "succeeded" ? (
            t.result === undefined || t.result === null ? (
              <p className="muted">The handler returned nothing (or the result expired).</p>
            ) : (
              <>
                <pre className="json result">{json(t.result)}</pre>
                {t.result_truncated && <p className="hint">Truncated to DTQ_RESULT_MAX_BYTES.</p>}
              </>
            )
          ) : (
            <p className="muted">No result: the task is {t.status}.</p>
          )}
        </section>
      </div>

      <section className="panel" aria-labelledby="errors-title">
        <h2 id="errors-title">Errors by attempt</h2>
        {(t.errors ?? []).length === 0 ? (
          <p className="muted">No attempt has failed.</p>
        ) : (
          <ol className="errors">
            {(t.errors ?? []).map((e) => (
              <li key={`${e.attempt}-${e.ts ?? ""}`}>
                <p>
                  <strong>Attempt {e.attempt}</strong> · <code>{e.type}</code>
                  {e.reason && e.reason !== "exception" ? ` · ${e.reason}` : ""}
                  {e.worker ? ` · ${e.worker}` : ""} · <RelTime at={e.ts ?? null} />
                </p>
                <p className="error-message">{e.message}</p>
                {e.traceback && (
                  <details>
                    <summary>Traceback</summary>
                    <pre>{e.traceback}</pre>
                  </details>
                )}
              </li>
            ))}
          </ol>
        )}
      </section>

      <section className="panel" aria-labelledby="timeline-title">
        <h2 id="timeline-title">Timeline</h2>
        <ol className="timeline">
          {timeline.map((m, i) => (
            <li key={`${m.at}-${m.label}-${i}`} className={m.live ? "live" : undefined}>
              <time dateTime={new Date(m.at).toISOString()} title={absolute(m.at)}>
                {new Date(m.at).toISOString().slice(11, 23)}
              </time>
              <span className="tl-label">{m.label}</span>
              {m.detail && <span className="muted">{m.detail}</span>}
            </li>
          ))}
        </ol>
        <p className="hint">Entries marked live arrived while this page was open.</p>
      </section>
    </section>
  );
}
