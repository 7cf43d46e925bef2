// Workflows: the recent ones, newest first, filtered by status and paged back in time; read
// again when a workflow starts or ends, and every few seconds while one listed is running.
import { useEffect, useState } from "react";
import { listWorkflows } from "../api/calls";
import { keys } from "../api/query";
import { WORKFLOW_STATUSES, type WorkflowList, type WorkflowStatus, type WorkflowSummary } from "../api/types";
import { Empty, Loaded, Meter, Pager, RelTime, StatusBadge } from "../components/ui";
import { count } from "../format";
import { type Resource, useResource } from "../live/context";
import { Link, setQuery, useLocation, workflowPath } from "../router";

function shortWorkflowId(id: string): string {
  return id.length > 12 ? `${id.slice(0, 12)}…` : id;
}

export function WorkflowsView() {
  const { query } = useLocation();
  const status = (query.get("status") as WorkflowStatus | null) || null;
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const cursor = cursors[cursors.length - 1] ?? null;
  const [running, setRunning] = useState(false);
  const page: Resource<WorkflowList> = useResource(
    keys.workflows(status, cursor),
    () => listWorkflows({ status, beforeMs: cursor === null ? null : Number(cursor) }),
    {
      match: (f) => f.type.startsWith("workflow."),
      debounceMs: 500,
      // Steps end without a workflow event: their counts are read again while one runs.
      intervalMs: running ? 5000 : undefined,
      keepPrevious: true,
    },
  );
  useEffect(() => {
    setRunning((page.data?.workflows ?? []).some((w) => w.status === "running"));
  }, [page.data]);

  const changeStatus = (value: string) => {
    setCursors([null]);
    setQuery({ status: value || null });
  };
  const next = page.data?.next_before_ms;

  return (
    <section aria-labelledby="workflows-title">
      <h1 id="workflows-title">Workflows</h1>
      <form className="filters" aria-label="Filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Status
          <select name="status" value={status ?? ""} onChange={(e) => changeStatus(e.target.value)}>
            <option value="">any status</option>
            {WORKFLOW_STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
      </form>
      <Loaded
        resource={page}
        what="workflows"
        empty={(data) =>
          data.workflows.length === 0 && (
            <Empty title={status ? `No workflow is ${status}` : "No workflows yet"}>
              {status ? (
                <>Clear the filter, or wait: this list is read again when a workflow starts or ends.</>
              ) : (
                <>
                  Submit one with <code>client.enqueue_workflow</code>, <code>POST /api/v1/workflows</code> or{" "}
                  <code>dtq workflow submit</code> and it appears here.
                </>
              )}
            </Empty>
          )
        }
      >
        {(data) => <WorkflowTable workflows={data.workflows} stale={page.stale} />}
      </Loaded>
      <Pager cursors={cursors} setCursors={setCursors} next={next === null || next === undefined ? null : String(next)} />
    </section>
  );
}

function WorkflowTable({ workflows, stale }: { workflows: WorkflowSummary[]; stale: boolean }) {
  return (
    <div className="table-wrap">
      <table className="workflows" aria-busy={stale}>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Id</th>
            <th scope="col">Status</th>
            <th scope="col">Steps ended</th>
            <th scope="col">Created</th>
            <th scope="col">Finished</th>
          </tr>
        </thead>
        <tbody>
          {workflows.map((w) => (
            <tr key={w.id} data-workflow-id={w.id} data-status={w.status} data-kind={w.kind ?? "workflow"}>
              <td>
                {w.name ?? <span className="muted">unnamed</span>}
                {w.kind === "batch" && <span className="badge kind-batch">batch</span>}
              </td>
              <td>
                <Link to={workflowPath(w.id)} title={w.id} className="mono">
                  {shortWorkflowId(w.id)}
                </Link>
              </td>
              <td>
                <StatusBadge status={w.status} />
              </td>
              <td data-steps={`${w.steps_ended}/${w.steps_total}`}>
                <Meter value={w.steps_ended} max={w.steps_total} label={`steps ended of ${w.name ?? w.id}`} />
                {count(w.steps_ended)} / {count(w.steps_total)}
              </td>
              <td>
                <RelTime at={w.created_at} />
              </td>
              <td>
                <RelTime at={w.finished_at} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
