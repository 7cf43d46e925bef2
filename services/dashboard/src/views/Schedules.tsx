// Schedules: the list with the next fire time (the API's next_fire_at) and the last tick's
// outcome, add, pause and resume, delete.
import { useState, type FormEvent } from "react";
import { deleteSchedule, listSchedules, pauseSchedule, putSchedule, resumeSchedule } from "../api/calls";
import { ApiError, describeError } from "../api/client";
import type { LastTick, Schedule, ScheduleRequest } from "../api/types";
import { useAuth } from "../auth";
import { ConfirmDialog, Empty, RelTime, useAction, Loaded } from "../components/ui";
import { duration, shortId } from "../format";
import { useResource } from "../live/context";
import { Link, taskPath } from "../router";

// What the latest tick did: the task it fired, or why the scheduler refused it (a schedule
// whose task no worker runs would otherwise look active while every tick fails).
function LastTickCell({ last }: { last: LastTick | null | undefined }) {
  if (!last) return <span className="muted">not yet</span>;
  const when = <RelTime at={last.at} />;
  switch (last.outcome) {
    case "fired":
    case "replayed":
      return (
        <span>
          {last.outcome}{" "}
          {last.task_id ? (
            <Link to={taskPath(last.task_id)} className="mono" title={last.task_id}>
              {shortId(last.task_id)}
            </Link>
          ) : null}{" "}
          {when}
        </span>
      );
    case "skipped":
      return <span className="muted">skipped (paused) {when}</span>;
    default:
      return (
        <span className="error-cell" data-tick={last.outcome}>
          <span className={`badge ${last.outcome === "refused" ? "status-dead" : "status-retrying"}`}>{last.outcome}</span>{" "}
          {when}: {last.reason ?? last.code}
        </span>
      );
  }
}

export function SchedulesView() {
  const { can } = useAuth();
  const admin = can("admin");
  // No event announces schedule changes: re-read after our own changes and every 15 s.
  const schedules = useResource("schedules", listSchedules, { intervalMs: 15_000 });
  const { busy, run } = useAction();
  const [deleting, setDeleting] = useState<Schedule | null>(null);

  const act = async (name: string, action: () => Promise<string>) => {
    await run(name, action);
    schedules.reload();
  };

  return (
    <section aria-labelledby="schedules-title">
      <h1 id="schedules-title">Schedules</h1>
      <Loaded
        resource={schedules}
        what="schedules"
        empty={() =>
          (schedules.data ?? []).length === 0 && (
            <Empty title="No schedules yet">
              {admin ? "Add one below" : "An operator can add one"} to submit a task on a cron expression (in a time zone) or every N seconds.
            </Empty>
          )
        }
      >
        {() => (
          <div className="table-wrap">
            <table className="schedules">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Task</th>
                  <th scope="col">Queue</th>
                  <th scope="col">When</th>
                  <th scope="col">Next fire</th>
                  <th scope="col">Last tick</th>
                  <th scope="col" className="num">Priority</th>
                  <th scope="col">State</th>
                  {admin && <th scope="col">Actions</th>}
                </tr>
              </thead>
              <tbody>
                {(schedules.data ?? []).map((s) => (
                  <tr key={s.name} data-schedule={s.name} data-paused={String(Boolean(s.paused))}>
                    <th scope="row">{s.name}</th>
                    <td>{s.task}</td>
                    <td>{s.queue ?? "default"}</td>
                    <td className="mono">{s.cron ? `${s.cron} (${s.timezone ?? "UTC"})` : `every ${duration(s.every_s)}`}</td>
                    <td data-next-fire={s.next_fire_at ?? "none"}>{s.paused ? <span className="muted">paused</span> : <RelTime at={s.next_fire_at} />}</td>
                    <td data-last-tick={s.last_tick?.outcome ?? "none"}>
                      <LastTickCell last={s.last_tick} />
                    </td>
                    <td className="num">{s.priority ?? 5}</td>
                    <td>
                      {s.paused ? (
                        <span className="badge paused">paused</span>
                      ) : s.last_tick?.outcome === "refused" ? (
                        <span className="badge status-dead" title={s.last_tick.reason ?? undefined}>
                          failing
                        </span>
                      ) : (
                        <span className="badge active">active</span>
                      )}
                    </td>
                    {admin && (
                      <td className="actions">
                        {s.paused ? (
                          <button type="button" disabled={busy !== null} onClick={() => void act(`Resume ${s.name}`, async () => (await resumeSchedule(s.name), `Schedule ${s.name} resumed`))}>
                            Resume
                          </button>
                        ) : (
                          <button type="button" disabled={busy !== null} onClick={() => void act(`Pause ${s.name}`, async () => (await pauseSchedule(s.name), `Schedule ${s.name} paused`))}>
                            Pause
                          </button>
                        )}
                        <button type="button" className="danger" disabled={busy !== null} onClick={() => setDeleting(s)}>
                          Delete…
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
      {admin && <AddSchedule onAdded={schedules.reload} />}
      <ConfirmDialog
        open={deleting !== null}
        title={`Delete schedule ${deleting?.name ?? ""}?`}
        confirmLabel="Delete"
        danger
        onCancel={() => setDeleting(null)}
        onConfirm={() => {
          const s = deleting;
          setDeleting(null);
          if (s) void act(`Delete ${s.name}`, async () => (await deleteSchedule(s.name), `Schedule ${s.name} deleted`));
        }}
      >
        <p>It stops firing at once. Tasks it already submitted are not affected.</p>
      </ConfirmDialog>
    </section>
  );
}

function parseJson(text: string, what: string): unknown {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${what} is not valid JSON`);
  }
}

function AddSchedule({ onAdded }: { onAdded: () => void }) {
  const [form, setForm] = useState({ name: "", task: "", queue: "", kind: "cron", when: "*/5 * * * *", timezone: "UTC", priority: "5", args: "", kwargs: "", allowUnknown: false });
  const [error, setError] = useState<string | null>(null);
  const { busy, run } = useAction();
  const set = (field: keyof typeof form) => (e: { target: { value: string } }) => setForm((f) => ({ ...f, [field]: e.target.value }));

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    let body: ScheduleRequest;
    try {
      const args = parseJson(form.args, "args");
      const kwargs = parseJson(form.kwargs, "kwargs");
      if (args !== undefined && !Array.isArray(args)) throw new Error("args must be a JSON array");
      if (kwargs !== undefined && (typeof kwargs !== "object" || kwargs === null || Array.isArray(kwargs)))
        throw new Error("kwargs must be a JSON object");
      body = {
        task: form.task.trim(),
        // Left out: the queue the task is registered on.
        ...(form.queue.trim() ? { queue: form.queue.trim() } : {}),
        allow_unknown_task: form.allowUnknown,
        priority: Number(form.priority),
        paused: false,
        // The API's defaults; a time zone for cron only (an interval takes UTC alone).
        misfire: "latest",
        misfire_cap: 100,
        jitter_s: 0,
        timezone: form.kind === "cron" ? form.timezone.trim() || "UTC" : "UTC",
        ...(form.kind === "cron" ? { cron: form.when.trim() } : { every_s: Number(form.when) }),
        ...(args !== undefined ? { args: args as unknown[] } : {}),
        ...(kwargs !== undefined ? { kwargs: kwargs as Record<string, unknown> } : {}),
      };
    } catch (err) {
      setError(describeError(err));
      return;
    }
    const name = form.name.trim();
    const ok = await run(`Save ${name}`, async () => {
      try {
        await putSchedule(name, body);
      } catch (err) {
        if (err instanceof ApiError) setError(describeError(err));
        throw err;
      }
      return `Schedule ${name} saved`;
    });
    if (ok) {
      setForm((f) => ({ ...f, name: "" }));
      onAdded();
    }
  };

  return (
    <form className="panel add-schedule" onSubmit={(e) => void submit(e)} aria-labelledby="add-title">
      <h2 id="add-title">Add or replace a schedule</h2>
      <div className="form-grid">
        <label>
          Name
          <input required value={form.name} onChange={set("name")} placeholder="nightly-report" pattern="[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}" />
        </label>
        <label>
          Task
          <input required value={form.task} onChange={set("task")} placeholder="reports.build" pattern="[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}" />
        </label>
        <label>
          Queue
          <input value={form.queue} onChange={set("queue")} placeholder="the task's registered queue" pattern="[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}" />
        </label>
        <label>
          Runs
          <select value={form.kind} onChange={(e) => setForm((f) => ({ ...f, kind: e.target.value, when: e.target.value === "cron" ? "*/5 * * * *" : "60" }))}>
            <option value="cron">on a cron expression</option>
            <option value="every">every N seconds</option>
          </select>
        </label>
        <label>
          {form.kind === "cron" ? "Cron expression" : "Every (seconds)"}
          <input required value={form.when} onChange={set("when")} inputMode={form.kind === "cron" ? "text" : "decimal"} />
        </label>
        {form.kind === "cron" && (
          <label>
            Time zone (IANA)
            <input value={form.timezone} onChange={set("timezone")} placeholder="Europe/Paris" spellCheck={false} />
          </label>
        )}
        <label>
          Priority (0-9)
          <input type="number" min={0} max={9} value={form.priority} onChange={set("priority")} />
        </label>
        <label>
          args (JSON array)
          <input value={form.args} onChange={set("args")} placeholder="[1, 2]" spellCheck={false} />
        </label>
        <label>
          kwargs (JSON object)
          <input value={form.kwargs} onChange={set("kwargs")} placeholder='{"kind": "daily"}' spellCheck={false} />
        </label>
        <label className="checkbox">
          <input type="checkbox" checked={form.allowUnknown} onChange={(e) => setForm((f) => ({ ...f, allowUnknown: e.target.checked }))} />
          Save even if no worker handles it yet (its ticks are refused until one does)
        </label>
      </div>
      {error && (
        <p className="error-text" role="alert">
          {error}
        </p>
      )}
      <button type="submit" className="primary" disabled={busy !== null}>
        Save schedule
      </button>
    </form>
  );
}
