// The dead-letter queue of a queue: browse, filter by task name, requeue or discard the
// selected tasks, requeue everything, purge (with confirmation).
import { useEffect, useState } from "react";
import { discardDead, listDead, listQueues, purgeDead, requeueDead } from "../api/calls";
import { keys } from "../api/query";
import { useAuth } from "../auth";
import { ConfirmDialog, Empty, ErrorBox, Loading, RelTime, useAction, Pager } from "../components/ui";
import { count, shortId } from "../format";
import { useResource } from "../live/context";
import { Link, setQuery, taskPath, useLocation } from "../router";

const DLQ_EVENTS = new Set(["task.dead", "task.discarded", "task.queued", "task.failed", "task.cancelled"]);

export function DlqView() {
  const { query } = useLocation();
  const { can } = useAuth();
  const admin = can("admin");
  const queues = useResource(keys.queues(), listQueues, {
    match: (f) => f.type === "task.dead" || f.type === "task.discarded",
    debounceMs: 1000,
  });
  const names = (queues.data ?? []).map((q) => q.name);
  const withDead = (queues.data ?? []).filter((q) => q.dead > 0);
  const queue = query.get("queue") ?? withDead[0]?.name ?? names[0] ?? null;
  const taskFilter = query.get("task");
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const cursor = cursors[cursors.length - 1] ?? null;
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [confirm, setConfirm] = useState<null | "purge" | "requeue-all" | "discard">(null);
  const [taskName, setTaskName] = useState(taskFilter ?? "");
  const { busy, run } = useAction();

  const dead = useResource(
    keys.dead(queue, taskFilter, cursor),
    () => (queue ? listDead(queue, { task: taskFilter, cursor }) : Promise.resolve({ items: [], next_cursor: null })),
    { match: (f) => f.queue === queue && DLQ_EVENTS.has(f.type), debounceMs: 500, keepPrevious: true },
  );

  useEffect(() => {
    setSelected(new Set());
  }, [queue, taskFilter, cursor]);

  const items = dead.data?.items ?? [];
  const allSelected = items.length > 0 && items.every((t) => selected.has(t.id));

  const act = async (name: string, action: () => Promise<string>) => {
    const ok = await run(name, action);
    if (ok) setSelected(new Set());
    dead.reload();
    queues.reload();
  };

  const toggle = (id: string) =>
    setSelected((s) => {
      const next = new Set(s);
      if (next.has(id)) next.delete(id);
      else next.add(id);
      return next;
    });

  const doConfirmed = () => {
    const what = confirm;
    setConfirm(null);
    if (!queue) return;
    if (what === "purge") void act("Purge dead letters", async () => `Discarded ${count((await purgeDead(queue)).count)} dead tasks of ${queue}`);
    if (what === "requeue-all")
      void act("Requeue all", async () => `Requeued ${count((await requeueDead(queue, taskFilter ? { task: taskFilter, all: false } : { all: true })).count)} tasks`);
    if (what === "discard") {
      const ids = [...selected];
      void act("Discard", async () => {
        let n = 0;
        for (const id of ids) n += (await discardDead(queue, id)).count;
        return `Discarded ${count(n)} dead tasks`;
      });
    }
  };

  return (
    <section aria-labelledby="dlq-title">
      <h1 id="dlq-title">Dead letters</h1>
      <p className="hint">
        Tasks that used up their attempts or failed permanently. Requeue them once the cause is fixed (their attempt budget
        starts over), or discard them.
      </p>
      <form
        className="filters"
        aria-label="Filters"
        onSubmit={(e) => {
          e.preventDefault();
          setCursors([null]);
          setQuery({ task: taskName.trim() || null });
        }}
      >
        <label>
          Queue
          <select
            name="queue"
            value={queue ?? ""}
            onChange={(e) => {
              setCursors([null]);
              setQuery({ queue: e.target.value || null });
            }}
          >
            {(queues.data ?? []).map((q) => (
              <option key={q.name} value={q.name}>
                {q.name} ({count(q.dead)} dead)
              </option>
            ))}
          </select>
        </label>
        <label>
          Task name
          <input name="task" value={taskName} onChange={(e) => setTaskName(e.target.value)} placeholder="emails.send" spellCheck={false} />
        </label>
        <button type="submit">Apply</button>
      </form>

      {admin && queue && (
        <div className="actions bulk" role="group" aria-label="Bulk actions">
          <span className="muted">{count(selected.size)} selected</span>
          <button
            type="button"
            className="primary"
            disabled={selected.size === 0 || busy !== null || dead.stale}
            onClick={() =>
              void act("Requeue", async () => `Requeued ${count((await requeueDead(queue, { ids: [...selected], all: false })).count)} tasks`)
            }
          >
            Requeue selected
          </button>
          <button type="button" disabled={selected.size === 0 || busy !== null || dead.stale} onClick={() => setConfirm("discard")}>
            Discard selected…
          </button>
          <button type="button" disabled={items.length === 0 || busy !== null || dead.stale} onClick={() => setConfirm("requeue-all")}>
            {taskFilter ? `Requeue all ${taskFilter}…` : "Requeue all…"}
          </button>
          <button type="button" className="danger" disabled={items.length === 0 || busy !== null || dead.stale} onClick={() => setConfirm("purge")}>
            Purge…
          </button>
        </div>
      )}

      {queues.error !== undefined && !queues.data ? (
        <ErrorBox error={queues.error} retry={queues.reload} what="the queues" />
      ) : !queue ? (
        queues.loading ? <Loading what="queues" /> : <Empty title="No queues yet">Dead letters appear here when a task exhausts its attempts.</Empty>
      ) : dead.error !== undefined && !dead.data ? (
        <ErrorBox error={dead.error} retry={dead.reload} what="the dead letters" />
      ) : dead.loading && !dead.data ? (
        <Loading what="dead letters" />
      ) : items.length === 0 ? (
        <Empty title={`No dead tasks in ${queue}`}>
          {taskFilter ? "None with this task name. Clear the filter to see all." : "Nothing has failed for good here. 🎉"}
        </Empty>
      ) : (
        <div className="table-wrap">
          {/* While another queue's or page's rows load, the previous ones stay, and nothing acts on them. */}
          <table className="dlq" aria-busy={dead.stale}>
            <thead>
              <tr>
                {admin && (
                  <th scope="col">
                    <input
                      type="checkbox"
                      aria-label="Select all on this page"
                      checked={allSelected}
                      disabled={dead.stale}
                      onChange={() => setSelected(allSelected ? new Set() : new Set(items.map((t) => t.id)))}
                    />
                  </th>
                )}
                <th scope="col">Task</th>
                <th scope="col">Id</th>
                <th scope="col" className="num">Attempts</th>
                <th scope="col">Last error</th>
                <th scope="col">Died</th>
              </tr>
            </thead>
            <tbody>
              {items.map((t) => {
                const last = t.last_error;
                return (
                  <tr key={t.id} data-task-id={t.id}>
                    {admin && (
                      <td>
                        <input type="checkbox" aria-label={`Select ${t.id}`} checked={selected.has(t.id)} disabled={dead.stale} onChange={() => toggle(t.id)} />
                      </td>
                    )}
                    <td>{t.task}</td>
                    <td>
                      <Link to={taskPath(t.id)} className="mono" title={t.id}>
                        {shortId(t.id)}
                      </Link>
                    </td>
                    <td className="num">{count(t.attempts)}</td>
                    <td className="error-cell">{last ? `${last.type}: ${last.message}` : "–"}</td>
                    <td>
                      <RelTime at={t.finished_at} />
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      <Pager cursors={cursors} setCursors={setCursors} next={dead.data?.next_cursor} />

      <ConfirmDialog
        open={confirm !== null}
        title={
          confirm === "purge"
            ? `Purge the dead letters of ${queue ?? ""}?`
            : confirm === "discard"
              ? `Discard ${count(selected.size)} dead tasks?`
              : `Requeue every dead task${taskFilter ? ` named ${taskFilter}` : ""} of ${queue ?? ""}?`
        }
        confirmLabel={confirm === "purge" ? "Purge" : confirm === "discard" ? "Discard" : "Requeue all"}
        danger={confirm !== "requeue-all"}
        onCancel={() => setConfirm(null)}
        onConfirm={doConfirmed}
      >
        <p>
          {confirm === "purge"
            ? `Every dead task of ${queue ?? ""} (${count(withDead.find((q) => q.name === queue)?.dead ?? items.length)}) is removed for good.`
            : confirm === "discard"
              ? "The selected tasks are removed from the dead-letter queue for good."
              : "They run again with a fresh attempt budget; their error history is kept."}
        </p>
      </ConfirmDialog>
    </section>
  );
}
