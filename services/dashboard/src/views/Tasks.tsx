// Tasks: search by id, filter by queue, status and task name, paged; rows follow the live
// events, and new tasks that match the filter appear at the top of the first page.
import { useState, type FormEvent } from "react";
import { listQueues, listTasks, type Page } from "../api/calls";
import { keys } from "../api/query";
import { TASK_STATUSES, type QueueStats, type TaskStatus, type TaskSummary } from "../api/types";
import { Empty, RelTime, StatusBadge, Pager, Loaded } from "../components/ui";
import { count, shortId } from "../format";
import type { EventFrame } from "../live/connection";
import { type Resource, useLiveEvents, useResource } from "../live/context";
import { Link, navigate, setQuery, taskPath, useLocation } from "../router";

/** The status a task has after an event of this type. */
export const STATUS_AFTER: Record<string, TaskStatus> = {
  "task.queued": "queued",
  "task.scheduled": "scheduled",
  "task.started": "running",
  "task.succeeded": "succeeded",
  "task.retrying": "retrying",
  "task.dead": "dead",
  "task.failed": "failed",
  "task.cancelled": "cancelled",
  "task.expired": "expired",
  "task.requeued": "queued",
};

function isoOf(ts: number | null): string {
  return new Date((ts ?? Date.now() / 1000) * 1000).toISOString();
}

/** The newest moment the row's data knows of, in ms: an event from before it is old news. */
function newestMs(task: TaskSummary): number {
  const times = [task.created_at, task.started_at, task.finished_at];
  return Math.max(0, ...times.map((at) => (at ? Math.floor(Date.parse(at)) : 0)));
}

export function applyEvent(
  page: Page<TaskSummary>,
  frame: EventFrame,
  filter: Filter,
  firstPage: boolean,
): Page<TaskSummary> {
  const status = STATUS_AFTER[frame.type];
  if (!status || !frame.task_id) return page;
  const index = page.items.findIndex((t) => t.id === frame.task_id);
  if (index >= 0) {
    const old = page.items[index] as TaskSummary;
    // A list read that answers after this event may already hold a later state: an older
    // event replayed on it (useResource's mutate) must not take it back, nor drop the row
    // from a filter it matches now.
    if (frame.ts !== null && Math.floor(frame.ts * 1000) < newestMs(old)) return page;
    const items = [...page.items];
    const updated: TaskSummary = { ...old, status };
    if (frame.type === "task.started") {
      updated.attempts = frame.attempt ?? old.attempts;
      updated.started_at = isoOf(frame.ts);
      updated.worker = frame.worker;
    }
    if (status !== "running" && status !== "queued" && status !== "scheduled" && status !== "retrying") {
      updated.finished_at = isoOf(frame.ts);
    }
    if (filter.status && status !== filter.status) items.splice(index, 1);
    else items[index] = updated;
    return { ...page, items };
  }
  const fresh = (frame.type === "task.queued" || frame.type === "task.scheduled") && frame.reason === null;
  if (!firstPage || !fresh) return page;
  if (filter.queue && frame.queue !== filter.queue) return page;
  if (filter.task && frame.task !== filter.task) return page;
  if (filter.status && filter.status !== status) return page;
  const task: TaskSummary = {
    id: frame.task_id,
    task: frame.task ?? "",
    queue: frame.queue ?? "",
    status,
    priority: 5,
    attempts: 0,
    max_attempts: null,
    created_at: isoOf(frame.ts),
    timeout_s: null,
    cancel_requested: false,
    result_truncated: false,
    // Sizes of a task just seen in an event: the row shows none of them.
    args_bytes: 0,
    kwargs_bytes: 0,
    metadata_bytes: 0,
    result_bytes: 0,
    errors_bytes: 0,
    error_count: 0,
  };
  return { ...page, items: [task, ...page.items].slice(0, 100) };
}

type Filter = { queue: string | null; status: TaskStatus | null; task: string | null };

export function TasksView() {
  const { query } = useLocation();
  const filter: Filter = {
    queue: query.get("queue"),
    status: (query.get("status") as TaskStatus | null) || null,
    task: query.get("task"),
  };
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const cursor = cursors[cursors.length - 1] ?? null;
  const page = useResource(keys.tasks({ ...filter, cursor }), () => listTasks({ ...filter, cursor }), {
    keepPrevious: true,
  });
  const queues: Resource<QueueStats[]> = useResource(keys.queues(), listQueues, {
    // A queue is created by its first task: read the list again when an unknown one appears.
    match: (f) => f.queue !== null && !(queues.data ?? []).some((q) => q.name === f.queue),
    debounceMs: 1000,
  });
  const [search, setSearch] = useState("");
  const [taskName, setTaskName] = useState(filter.task ?? "");

  useLiveEvents((frame) => {
    page.mutate((current) => applyEvent(current, frame, filter, cursors.length === 1));
  });

  const changeFilter = (values: Record<string, string | null>) => {
    setCursors([null]);
    setQuery(values);
  };

  const submitSearch = (e: FormEvent) => {
    e.preventDefault();
    const id = search.trim();
    if (id) navigate(taskPath(id));
  };

  return (
    <section aria-labelledby="tasks-title">
      <h1 id="tasks-title">Tasks</h1>
      <form className="search" role="search" onSubmit={submitSearch}>
        <label htmlFor="task-id">Find a task by id</label>
        <input
          id="task-id"
          value={search}
          onChange={(e) => setSearch(e.target.value)}
          placeholder="queue:0123456789abcdef…"
          spellCheck={false}
        />
        <button type="submit" disabled={!search.trim()}>
          Open
        </button>
      </form>
      <form
        className="filters"
        aria-label="Filters"
        onSubmit={(e) => {
          e.preventDefault();
          changeFilter({ task: taskName.trim() || null });
        }}
      >
        <label>
          Queue
          <select name="queue" value={filter.queue ?? ""} onChange={(e) => changeFilter({ queue: e.target.value || null })}>
            <option value="">all queues</option>
            {(queues.data ?? []).map((q) => (
              <option key={q.name} value={q.name}>
                {q.name}
              </option>
            ))}
            {filter.queue && !(queues.data ?? []).some((q) => q.name === filter.queue) && (
              <option value={filter.queue}>{filter.queue}</option>
            )}
          </select>
        </label>
        <label>
          Status
          <select name="status" value={filter.status ?? ""} onChange={(e) => changeFilter({ status: e.target.value || null })}>
            <option value="">any status</option>
            {TASK_STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
        <label>
          Task name
          <input name="task" value={taskName} onChange={(e) => setTaskName(e.target.value)} placeholder="emails.send" spellCheck={false} />
        </label>
        <button type="submit">Apply</button>
        {(filter.queue || filter.status || filter.task) && (
          <button
            type="button"
            className="link"
            onClick={() => {
              setTaskName("");
              changeFilter({ queue: null, status: null, task: null });
            }}
          >
            Clear filters
          </button>
        )}
      </form>

      <Loaded
        resource={page}
        what="tasks"
        empty={() =>
          (page.data?.items ?? []).length === 0 && (
            <Empty title={filter.queue || filter.status || filter.task ? "No task matches these filters" : "No tasks yet"}>
              {page.data?.next_cursor ? (
                <>This page held no match; older tasks may. Use “Older” below to look further back.</>
              ) : filter.queue || filter.status || filter.task ? (
                <>Clear a filter, or wait: new matching tasks appear here live.</>
              ) : (
                <>Submit a task and it appears here live.</>
              )}
            </Empty>
          )
        }
      >
        {() => (
          <TaskTable tasks={page.data?.items ?? []} stale={page.stale} />
        )}
      </Loaded>
      <Pager cursors={cursors} setCursors={setCursors} next={page.data?.next_cursor} />
    </section>
  );
}

function TaskTable({ tasks, stale }: { tasks: TaskSummary[]; stale: boolean }) {
  return (
    <div className="table-wrap">
      {/* Another filter's or page's rows, while this one's load: shown dimmed and busy. */}
      <table className="tasks" aria-busy={stale}>
        <thead>
          <tr>
            <th scope="col">Task</th>
            <th scope="col">Id</th>
            <th scope="col">Queue</th>
            <th scope="col">Status</th>
            <th scope="col" className="num">Attempts</th>
            <th scope="col">Created</th>
            <th scope="col">Finished</th>
          </tr>
        </thead>
        <tbody>
          {tasks.map((t) => (
            <tr key={t.id} data-task-id={t.id} data-status={t.status}>
              <td>{t.task}</td>
              <td>
                <Link to={taskPath(t.id)} title={t.id} className="mono">
                  {shortId(t.id)}
                </Link>
              </td>
              <td>{t.queue}</td>
              <td>
                <StatusBadge status={t.status} />
              </td>
              <td className="num">
                {count(t.attempts)}
                {t.max_attempts ? ` / ${count(t.max_attempts)}` : ""}
              </td>
              <td>
                <RelTime at={t.created_at} />
              </td>
              <td>
                <RelTime at={t.finished_at} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
