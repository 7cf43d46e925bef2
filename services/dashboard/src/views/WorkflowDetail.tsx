// One workflow: its status and counts, the step graph (each step opens its task), its result
// or the error of the step that failed it, and cancel. Read again when its workflow events or
// its steps' task events arrive, and every few seconds while it runs.
import { useEffect, useState } from "react";
import { cancelWorkflow, getWorkflow } from "../api/calls";
import { ApiError } from "../api/client";
import type { Workflow, WorkflowStep } from "../api/types";
import { useAuth } from "../auth";
import { Empty, ErrorBox, Loading, RelTime, StatusBadge, useAction } from "../components/ui";
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

/** Whether an event may change this workflow: its own events, its steps' task events, and
 * the submit of a step still pending (its task id is not known yet). */
function concerns(w: Workflow | undefined, id: string, f: EventFrame): boolean {
  if (f.type.startsWith("workflow.")) return f.data?.workflow_id === id;
  if (!w || !f.task_id || f.type === "task.progress") return false;
  const steps = w.steps ?? [];
  if (steps.some((s) => s.task_id === f.task_id)) return true;
  return f.type === "task.queued" && steps.some((s) => s.status === "pending" && s.task === f.task && s.queue === f.queue);
}

export function WorkflowDetail({ id }: { id: string }) {
  const { can } = useAuth();
  const [running, setRunning] = useState(true);
  const workflow: Resource<Workflow> = useResource(`workflow:${id}`, () => getWorkflow(id), {
    match: (f) => concerns(workflow.data, id, f),
    debounceMs: 250,
    intervalMs: running ? 3000 : undefined,
  });
  const { busy, run } = useAction();
  useEffect(() => {
    if (workflow.data) setRunning(workflow.data.status === "running");
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
        {w.name ?? "Workflow"} <StatusBadge status={w.status} />
      </h1>
      <p className="mono muted id-line">{w.id}</p>
      {can("admin") && (
        <div className="actions">
          <button type="button" disabled={w.status !== "running" || busy !== null} onClick={() => void cancel()}>
            Cancel
          </button>
        </div>
      )}

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

      <section className="panel" aria-labelledby="graph-title">
        <h2 id="graph-title">Steps</h2>
        <WorkflowGraph steps={steps} failedStep={w.failed_step} />
        <p className="hint">
          Columns go left to right in the order steps can run; a line joins each step to the steps it waits for. Select a
          submitted step to open its task.
        </p>
      </section>

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
          <p className="muted">The workflow&apos;s last step returned nothing.</p>
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
