// Schedules: the list with the next fire time (the API's next_fire_at) and the last tick's
// outcome, add, pause and resume, delete.
import { useRef, useState, type FormEvent } from "react";
import { deleteSchedule, listSchedules, pauseSchedule, putSchedule, resumeSchedule } from "../api/calls";
import { keys } from "../api/query";
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
  const schedules = useResource(keys.schedules(), listSchedules, { intervalMs: 15_000 });
  const { busy, run } = useAction();
  const [deleting, setDeleting] = useState<Schedule | null>(null);
  // The form starts from a schedule when its Edit button is pressed (a new form each time).
  const [draft, setDraft] = useState<{ initial: Draft; editing: boolean; n: number }>({ initial: NEW_DRAFT, editing: false, n: 0 });
  const formRef = useRef<HTMLDivElement>(null);
  const startEdit = (s: Schedule) => {
    setDraft((d) => ({ initial: draftOf(s), editing: true, n: d.n + 1 }));
    window.requestAnimationFrame(() => {
      formRef.current?.scrollIntoView({ block: "start" });
      formRef.current?.querySelector<HTMLInputElement>("input[name='task']")?.focus();
    });
  };

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
                    <td>
                      <span className="mono">{s.cron ? `${s.cron} (${s.timezone ?? "UTC"})` : `every ${duration(s.every_s)}`}</span>
                      <span className="schedule-policy muted" data-misfire={s.misfire ?? "latest"} data-jitter={s.jitter_s ?? 0}>
                        {misfireText(s)}
                        {(s.jitter_s ?? 0) > 0 ? ` · jitter ${duration(s.jitter_s)}` : ""}
                      </span>
                    </td>
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
                        <button type="button" disabled={busy !== null} onClick={() => startEdit(s)} aria-label={`Edit ${s.name}`}>
                          Edit
                        </button>
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
      {admin && (
        <div ref={formRef}>
          <AddSchedule
            key={draft.n}
            initial={draft.initial}
            editing={draft.editing}
            onAdded={() => {
              setDraft((d) => ({ initial: NEW_DRAFT, editing: false, n: d.n + 1 }));
              schedules.reload();
            }}
          />
        </div>
      )}
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

function misfireText(s: Schedule): string {
  switch (s.misfire ?? "latest") {
    case "skip":
      return "missed ticks skipped";
    case "all":
      return `missed ticks all fired (at most ${s.misfire_cap ?? 100})`;
    default:
      return "latest missed tick fired";
  }
}

function parseJson(text: string, what: string): unknown {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${what} is not valid JSON`);
  }
}

type Misfire = ScheduleRequest["misfire"];

/** The form's fields, as text where the inputs hold text. */
export type Draft = {
  name: string;
  task: string;
  queue: string;
  kind: "cron" | "every";
  when: string;
  timezone: string;
  priority: string;
  args: string;
  kwargs: string;
  misfire: Misfire;
  misfireCap: string;
  jitter: string;
  paused: boolean;
  allowUnknown: boolean;
};

const NEW_DRAFT: Draft = {
  name: "",
  task: "",
  queue: "",
  kind: "cron",
  when: "*/5 * * * *",
  timezone: "UTC",
  priority: "5",
  args: "",
  kwargs: "",
  misfire: "latest",
  misfireCap: "100",
  jitter: "0",
  paused: false,
  allowUnknown: false,
};

/** A schedule as the form edits it: every field it has, so saving it changes only what was
 * edited (its misfire policy and jitter too, which the API defaults when left out). */
export function draftOf(s: Schedule): Draft {
  const json = (v: unknown, empty: unknown) => (JSON.stringify(v ?? empty) === JSON.stringify(empty) ? "" : JSON.stringify(v));
  return {
    name: s.name,
    task: s.task,
    queue: s.queue ?? "",
    kind: s.cron ? "cron" : "every",
    when: s.cron ?? String(s.every_s ?? 60),
    timezone: s.timezone ?? "UTC",
    priority: String(s.priority ?? 5),
    args: json(s.args, []),
    kwargs: json(s.kwargs, {}),
    misfire: s.misfire ?? "latest",
    misfireCap: String(s.misfire_cap ?? 100),
    jitter: String(s.jitter_s ?? 0),
    paused: Boolean(s.paused),
    // It was saved once: its task was known then, or allowed unknown.
    allowUnknown: true,
  };
}

function AddSchedule({ initial, editing, onAdded }: { initial: Draft; editing: boolean; onAdded: () => void }) {
  const [form, setForm] = useState<Draft>(initial);
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
        // An edited schedule stays paused or active as it was.
        paused: form.paused,
        misfire: form.misfire,
        misfire_cap: Number(form.misfireCap),
        jitter_s: Number(form.jitter),
        // A time zone for cron only (an interval takes UTC alone).
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
      setForm((f) => ({ ...f, name: "", paused: false }));
      onAdded();
    }
  };

  return (
    <form className="panel add-schedule" onSubmit={(e) => void submit(e)} aria-labelledby="add-title">
      <h2 id="add-title">{editing ? `Edit schedule ${initial.name}` : "Add or replace a schedule"}</h2>
      <div className="form-grid">
        <label>
          Name
          <input name="name" required value={form.name} onChange={set("name")} placeholder="nightly-report" pattern="[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}" />
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
          <select
            name="kind"
            value={form.kind}
            onChange={(e) => {
              const kind = e.target.value === "cron" ? "cron" : "every";
              setForm((f) => ({ ...f, kind, when: kind === "cron" ? "*/5 * * * *" : "60" }));
            }}
          >
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
          <input name="priority" type="number" min={0} max={9} value={form.priority} onChange={set("priority")} />
        </label>
        <label>
          Missed ticks (no scheduler running)
          <select name="misfire" value={form.misfire} onChange={(e) => setForm((f) => ({ ...f, misfire: e.target.value as Misfire }))}>
            <option value="latest">fire the latest one</option>
            <option value="skip">skip them</option>
            <option value="all">fire each, oldest first</option>
          </select>
        </label>
        {form.misfire === "all" && (
          <label>
            Most ticks fired at once
            <input name="misfire_cap" type="number" min={1} max={1000} required value={form.misfireCap} onChange={set("misfireCap")} />
          </label>
        )}
        <label>
          Jitter (seconds, 0-3600)
          <input name="jitter_s" type="number" min={0} max={3600} step="any" required value={form.jitter} onChange={set("jitter")} />
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
      {form.paused && <span className="hint"> It stays paused: resume it from the list.</span>}
    </form>
  );
}
