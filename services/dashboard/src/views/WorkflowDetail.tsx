// One workflow: its status and counts, the step graph (each step opens its task), its result
// or the error of the step that failed it, and cancel. Read again when its workflow events or
// its steps' task events arrive, and every few seconds while it runs.
//
// A batch (kind "batch", up to 10,000 tasks) is not drawn: its tasks do not wait for one
// another, so the graph would be one tall column of unconnected nodes, thousands of them in
// the DOM. It shows its live counts (GET /batches/{id}, the cheap read, every 3 s while it
// runs), Seal, and its steps as a table filtered by status and paged 50 at a time; its full
// record (every step) is read at most every 2 s on events and every 10 s otherwise.
import { useEffect, useMemo, useRef, useState } from "react";
import { cancelWorkflow, getBatch, getWorkflow, sealBatch } from "../api/calls";
import { keys } from "../api/query";
import { ApiError } from "../api/client";
import type { Batch, Workflow, WorkflowStep } from "../api/types";
import { useAuth } from "../auth";
import { Empty, ErrorBox, Loading, Meter, RelTime, StatusBadge, useAction } from "../components/ui";
import { WorkflowGraph } from "../components/WorkflowGraph";
import { count, duration, json } from "../format";
import type { EventFrame } from "../live/connection";
import { type Resource, useResource } from "../live/context";
import { Link, taskPath } from "../router";

const FAILED = new Set(["dead", "failed", "cancelled", "expired"]);
const ACTIVE = new Set(["running", "retrying"]);

function tally(steps: WorkflowStep[]) {
  const of = (test: (s: WorkflowStep) => boolean) => steps.filter(test).length;
  return {
    succeeded: of((s) => s.status === "succeeded"),
    failed: of((s) => FAILED.has(s.status)),
    running: of((s) => ACTIVE.has(s.status)),
    waiting: of((s) => !FAILED.has(s.status) && !ACTIVE.has(s.status) && s.status !== "succeeded"),
  };
}

/** A workflow's steps indexed for `concerns` (an event costs a lookup, not a scan of 10,000). */
type StepIndex = { taskIds: Set<string>; pending: Set<string> };

function indexSteps(steps: WorkflowStep[]): StepIndex {
  const taskIds = new Set<string>();
  const pending = new Set<string>();
  for (const s of steps) {
    if (s.task_id) taskIds.add(s.task_id);
    if (s.status === "pending") pending.add(`${s.task}\u0000${s.queue}`);
  }
  return { taskIds, pending };
}

/** Whether an event may change this workflow: its own events, its steps' task events, and
 * the submit of a step still pending (its task id is not known yet). */
function concerns(index: StepIndex | undefined, id: string, f: EventFrame): boolean {
  if (f.type.startsWith("workflow.")) return f.data?.workflow_id === id;
  if (!index || !f.task_id || f.type === "task.progress") return false;
  if (index.taskIds.has(f.task_id)) return true;
  return f.type === "task.queued" && index.pending.has(`${f.task ?? ""}\u0000${f.queue ?? ""}`);
}

export function WorkflowDetail({ id }: { id: string }) {
  const { can } = useAuth();
  const [running, setRunning] = useState(true);
  const [isBatch, setIsBatch] = useState(false);
  const index = useRef<StepIndex | undefined>(undefined);
  const workflow: Resource<Workflow> = useResource(keys.workflow(id), () => getWorkflow(id), {
    match: (f) => concerns(index.current, id, f),
    // A batch's record holds every task: read at most every 2 s (its counts are read apart).
    debounceMs: isBatch ? 2000 : 250,
    intervalMs: running ? (isBatch ? 10_000 : 3000) : undefined,
  });
  const { busy, run } = useAction();
  useEffect(() => {
    index.current = workflow.data ? indexSteps(workflow.data.steps ?? []) : undefined;
    if (workflow.data) {
      setRunning(workflow.data.status === "running");
      setIsBatch(workflow.data.kind === "batch");
    }
  }, [workflow.data]);

  if (workflow.error !== undefined && !workflow.data) {
    if (workflow.error instanceof ApiError && workflow.error.status === 404) {
      return (
        <section>
          <h1>Workflow not found</h1>
          <Empty title={`No workflow has the id ${id}`}>
            Its record may have expired, or the id is mistyped. <Link to="/workflows">Browse the workflows</Link>.
          </Empty>
        </section>
      );
    }
    return <ErrorBox error={workflow.error} retry={workflow.reload} what={`workflow ${id}`} />;
  }
  if (!workflow.data) return <Loading what="the workflow" />;
  const w = workflow.data;
  const steps = w.steps ?? [];
  const batch = w.kind === "batch";
  const counts = tally(steps);
  const runTime = w.finished_at ? (Date.parse(w.finished_at) - Date.parse(w.created_at)) / 1000 : null;

  const cancel = async () => {
    await run("Cancel", async () => `Cancel: the workflow is now ${(await cancelWorkflow(w.id)).status}`);
    workflow.reload();
  };

  return (
    <section aria-labelledby="workflow-title" className="workflow-detail">
      <p className="crumbs">
        <Link to="/workflows">Workflows</Link>
      </p>
      <h1 id="workflow-title">
        {w.name ?? (batch ? "Batch" : "Workflow")} {batch && <span className="badge kind-batch">batch</span>}{" "}
        <StatusBadge status={w.status} />
      </h1>
      <p className="mono muted id-line">{w.id}</p>
      {w.parent_task_id && (
        <p className="parent-line" data-fact="parent">
          children of task{" "}
          <Link to={taskPath(w.parent_task_id)} className="mono">
            {w.parent_task_id}
          </Link>
        </p>
      )}
      {can("admin") && (
        <div className="actions">
          <button type="button" disabled={w.status !== "running" || busy !== null} onClick={() => void cancel()}>
            Cancel
          </button>
        </div>
      )}

      {batch ? (
        <dl className="facts">
          <div><dt>Created</dt><dd><RelTime at={w.created_at} /></dd></div>
          <div><dt>Finished</dt><dd><RelTime at={w.finished_at} /></dd></div>
          <div><dt>Run time</dt><dd>{duration(runTime)}</dd></div>
        </dl>
      ) : (
      <dl className="facts">
        <div data-fact="steps">
          <dt>Steps ended</dt>
          <dd>
            {count(w.steps_ended)} of {count(w.steps_total)}
          </dd>
        </div>
        <div data-fact="succeeded"><dt>Succeeded</dt><dd>{count(counts.succeeded)}</dd></div>
        <div data-fact="failed"><dt>Failed or cancelled</dt><dd>{count(counts.failed)}</dd></div>
        <div data-fact="running"><dt>Running</dt><dd>{count(counts.running)}</dd></div>
        <div data-fact="waiting"><dt>Waiting</dt><dd>{count(counts.waiting)}</dd></div>
        <div><dt>On failure</dt><dd>{w.on_failure}</dd></div>
        <div><dt>Created</dt><dd><RelTime at={w.created_at} /></dd></div>
        <div><dt>Finished</dt><dd><RelTime at={w.finished_at} /></dd></div>
        <div><dt>Run time</dt><dd>{duration(runTime)}</dd></div>
      </dl>
      )}

      {batch ? (
        <BatchView workflow={w} reloadWorkflow={workflow.reload} />
      ) : (
        <section className="panel" aria-labelledby="graph-title">
          <h2 id="graph-title">Steps</h2>
          <WorkflowGraph steps={steps} failedStep={w.failed_step} />
          <p className="hint">
            Columns go left to right in the order steps can run; a line joins each step to the steps it waits for. Select
            a submitted step to open its task.
          </p>
        </section>
      )}

      <Outcome workflow={w} />
    </section>
  );
}

function Outcome({ workflow: w }: { workflow: Workflow }) {
  const failed = w.failed_step === null || w.failed_step === undefined ? undefined : (w.steps ?? []).find((s) => s.step === w.failed_step);
  return (
    <section className="panel" aria-labelledby="outcome-title">
      <h2 id="outcome-title">{w.status === "succeeded" ? "Result" : w.error !== undefined && w.error !== null ? "Error" : "Outcome"}</h2>
      {failed && (
        <p className="failed-step-line" data-failed-step={failed.step}>
          Step {failed.step} ({failed.task}) failed the workflow
          {failed.task_id ? (
            <>
              : <Link to={taskPath(failed.task_id)}>open its task</Link>
            </>
          ) : null}
          .
        </p>
      )}
      {w.status === "succeeded" ? (
        w.result === undefined || w.result === null ? (
          <p className="muted">
            {w.kind === "batch"
              ? "A batch has no result of its own: its counts and its callbacks are above."
              : "The workflow\u2019s last step returned nothing."}
          </p>
        ) : (
          <pre className="json result">{json(w.result)}</pre>
        )
      ) : w.error !== undefined && w.error !== null ? (
        <pre className="json error-value">{json(w.error)}</pre>
      ) : w.status === "running" ? (
        <p className="muted">
          No result yet: {count(w.steps_ended)} of {count(w.steps_total)} steps have ended.
        </p>
      ) : (
        <p className="muted">No result: the workflow is {w.status}.</p>
      )}
    </section>
  );
}

/** Each step's role in a batch: its callbacks come first (on_success, then on_complete, each
 * only when given), then its tasks. */
function batchRole(b: Batch | undefined, step: number): string {
  if (!b) return "";
  const callbacks = [b.on_success !== null ? "on_success" : null, b.on_complete !== null ? "on_complete" : null].filter(
    (r): r is string => r !== null,
  );
  return callbacks[step] ?? "task";
}

function callbackCount(b: Batch): number {
  return (b.on_success !== null ? 1 : 0) + (b.on_complete !== null ? 1 : 0);
}

/** A batch's counts, its callbacks, Seal, and its steps as a table. */
function BatchView({ workflow: w, reloadWorkflow }: { workflow: Workflow; reloadWorkflow: () => void }) {
  const { can } = useAuth();
  const id = w.id;
  const steps = w.steps ?? [];
  const index = useMemo(() => indexSteps(steps), [steps]);
  const [running, setRunning] = useState(true);
  const batch: Resource<Batch> = useResource(keys.batch(id), () => getBatch(id), {
    match: (f) => concerns(index, id, f),
    debounceMs: 250,
    // Tasks are added without an event for the batch: read its counts again while it runs.
    intervalMs: running ? 3000 : undefined,
  });
  const { busy, run } = useAction();
  const b = batch.data;
  useEffect(() => {
    if (b) setRunning(b.status === "running");
  }, [b]);
  // When tasks are added, it is sealed or it ends, the steps (and the header) are read again.
  const shape = b ? `${b.total}:${b.sealed}:${b.status}:${b.on_success}:${b.on_complete}` : "";
  const seen = useRef(shape);
  useEffect(() => {
    if (seen.current !== shape) {
      const before = seen.current;
      seen.current = shape;
      if (before && shape) reloadWorkflow();
    }
  }, [shape, reloadWorkflow]);

  const seal = async () => {
    await run("Seal", async () => {
      const sealed = await sealBatch(id);
      return `Seal: the batch is sealed with ${count(sealed.total)} ${sealed.total === 1 ? "task" : "tasks"}`;
    });
    batch.reload();
    reloadWorkflow();
  };

  const callback = (role: "on_success" | "on_complete", state: string | null | undefined) => {
    if (state === null || state === undefined) return <span className="muted">none</span>;
    const step = b ? steps.find((s) => batchRole(b, s.step) === role) : undefined;
    return (
      <>
        <StatusBadge status={state} />
        {step?.task_id && (
          <>
            {" "}
            <Link to={taskPath(step.task_id)}>{step.task}</Link>
          </>
        )}
      </>
    );
  };

  return (
    <>
      <section className="panel batch-panel" aria-labelledby="batch-title">
        <h2 id="batch-title">Batch</h2>
        {batch.error !== undefined && !b ? (
          <ErrorBox error={batch.error} retry={batch.reload} what={`the counts of batch ${id}`} />
        ) : !b ? (
          <Loading what="the batch's counts" />
        ) : (
          <>
            <p className="batch-meter">
              <Meter value={b.succeeded + b.failed} max={b.total} label="tasks ended" />
              {count(b.succeeded + b.failed)} of {count(b.total)} tasks ended
            </p>
            <dl className="facts">
              <div data-fact="batch-total"><dt>Tasks</dt><dd>{count(b.total)}</dd></div>
              <div data-fact="batch-pending"><dt>Pending</dt><dd>{count(b.pending)}</dd></div>
              <div data-fact="batch-succeeded"><dt>Succeeded</dt><dd>{count(b.succeeded)}</dd></div>
              <div data-fact="batch-failed"><dt>Failed</dt><dd>{count(b.failed)}</dd></div>
              <div data-fact="batch-sealed" data-sealed={String(b.sealed)}>
                <dt>Sealed</dt>
                <dd>{b.sealed ? "sealed" : "open"}</dd>
              </div>
              <div data-fact="batch-on-success"><dt>On success</dt><dd>{callback("on_success", b.on_success)}</dd></div>
              <div data-fact="batch-on-complete"><dt>On complete</dt><dd>{callback("on_complete", b.on_complete)}</dd></div>
            </dl>
            {can("submit") && (
              <div className="actions">
                <button
                  type="button"
                  className="primary"
                  disabled={b.sealed || b.status !== "running" || busy !== null}
                  onClick={() => void seal()}
                >
                  Seal
                </button>
                <span className="hint">
                  {b.sealed
                    ? "Sealed: nothing more can be added; the callbacks run once every task has ended."
                    : "Open: tasks can still be added. Seal it so that it can end and its callbacks run."}
                </span>
              </div>
            )}
          </>
        )}
      </section>
      <BatchSteps steps={steps} batch={b} />
    </>
  );
}

const PAGE = 50;

/** A batch's steps, filtered by status and paged: a table stays usable at 10,000 rows. */
function BatchSteps({ steps, batch }: { steps: WorkflowStep[]; batch: Batch | undefined }) {
  const [status, setStatus] = useState("");
  const [page, setPage] = useState(0);
  const statuses = useMemo(() => [...new Set(steps.map((s) => s.status))].sort(), [steps]);
  const shown = useMemo(() => (status ? steps.filter((s) => s.status === status) : steps), [steps, status]);
  const pages = Math.max(1, Math.ceil(shown.length / PAGE));
  const current = Math.min(page, pages - 1);
  const rows = shown.slice(current * PAGE, (current + 1) * PAGE);
  const members = batch ? steps.length - callbackCount(batch) : steps.length;
  return (
    <section className="panel" aria-labelledby="steps-title">
      <h2 id="steps-title">Steps</h2>
      <form className="filters" aria-label="Step filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Status
          <select
            name="step-status"
            value={status}
            onChange={(e) => {
              setStatus(e.target.value);
              setPage(0);
            }}
          >
            <option value="">any status</option>
            {statuses.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
      </form>
      {shown.length === 0 ? (
        <Empty title={status ? `No step is ${status}` : "No task in this batch yet"}>
          {status ? "Clear the filter." : "Add tasks with POST /api/v1/batches/{id}/tasks or dtq batch add."}
        </Empty>
      ) : (
        <div className="table-wrap">
          <table className="batch-steps">
            <thead>
              <tr>
                <th scope="col" className="num">Step</th>
                <th scope="col">Role</th>
                <th scope="col">Task</th>
                <th scope="col">Status</th>
                <th scope="col" className="num">Attempts</th>
                <th scope="col">Finished</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((s) => (
                <tr key={s.step} data-step={s.step} data-status={s.status}>
                  <td className="num">#{s.step}</td>
                  <td>{batchRole(batch, s.step)}</td>
                  <td>{s.task_id ? <Link to={taskPath(s.task_id)}>{s.task}</Link> : s.task}</td>
                  <td>
                    <StatusBadge status={s.status} />
                  </td>
                  <td className="num">{count(s.attempts ?? 0)}</td>
                  <td>
                    <RelTime at={s.finished_at} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <nav className="pager" aria-label="Step pages">
        <button type="button" disabled={current === 0} onClick={() => setPage(current - 1)}>
          ← Previous
        </button>
        <span className="muted">
          {shown.length === 0
            ? "none"
            : `${count(current * PAGE + 1)}–${count(current * PAGE + rows.length)} of ${count(shown.length)}`}
        </span>
        <button type="button" disabled={current >= pages - 1} onClick={() => setPage(current + 1)}>
          Next →
        </button>
      </nav>
      <p className="hint">
        {count(members)} {members === 1 ? "task" : "tasks"}, after the callbacks. A batch&apos;s tasks wait for no
        other, so they are listed rather than drawn; select a submitted step to open its task.
      </p>
    </section>
  );
}
