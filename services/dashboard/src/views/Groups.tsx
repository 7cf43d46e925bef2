// The groups of one queue, by name: waiting, queued, running, weight, paused; pause, resume
// and a weight per group (docs/flow-control.md, "Groups").
import { useState } from "react";
import { changeGroup, listGroups } from "../api/calls";
import { keys } from "../api/query";
import type { GroupStats } from "../api/types";
import { useAuth } from "../auth";
import { ConfirmDialog, Empty, Loaded, Pager, useAction } from "../components/ui";
import { count } from "../format";
import { useResource } from "../live/context";
import { Link } from "../router";

/** The dashboard path of a queue's groups. */
export function groupsPath(queue: string): string {
  return `/queues/${encodeURIComponent(queue)}/groups`;
}

/** The queue a groups path names, or null when `path` is not one. */
export function groupsRoute(path: string): string | null {
  const m = /^\/queues\/([^/]+)\/groups$/.exec(path);
  return m?.[1] ? decodeURIComponent(m[1]) : null;
}

export function GroupsView({ queue }: { queue: string }) {
  const { can } = useAuth();
  const admin = can("admin");
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const cursor = cursors[cursors.length - 1] ?? null;
  const page = useResource(keys.groups(queue, cursor), () => listGroups(queue, cursor), {
    keepPrevious: true,
    match: (f) => f.queue === queue && (f.type.startsWith("task.") || f.type.startsWith("queue.")),
    debounceMs: 700,
  });
  const { busy, run } = useAction();
  const [weighing, setWeighing] = useState<GroupStats | null>(null);
  const [weight, setWeight] = useState("");

  const act = async (name: string, action: () => Promise<string>) => {
    await run(name, action);
    page.reload();
  };
  const weightBody = (): number => {
    // Not a whole number: it goes as written, and the API's 422 names it.
    const text = weight.trim();
    return Number.isInteger(Number(text)) && text !== "" ? Number(text) : (text as unknown as number);
  };

  return (
    <section aria-labelledby="groups-title">
      <p className="crumbs">
        <Link to="/queues">Queues</Link> / <Link to={`/tasks?queue=${encodeURIComponent(queue)}`}>{queue}</Link>
      </p>
      <h1 id="groups-title">Groups of {queue}</h1>
      <p className="hint">
        A paused group&apos;s waiting tasks stay waiting and its running tasks finish; a group of weight w gets w turns for
        another&apos;s one. Groups holding tasks are listed, and those paused or given a weight.
      </p>
      {!admin && <p className="hint">Your key is read-only: pausing a group and its weight need the admin scope.</p>}
      <Loaded
        resource={page}
        what={`groups of ${queue}`}
        empty={(data) =>
          data.groups.length === 0 &&
          cursors.length === 1 && (
            <Empty title={`No groups in ${queue}`}>
              A group appears when a task carrying <code>group</code> is submitted to this queue.
            </Empty>
          )
        }
      >
        {(data) => (
          <>
            <div className="table-wrap">
              <table className="groups" aria-busy={page.stale}>
                <thead>
                  <tr>
                    <th scope="col">Group</th>
                    <th scope="col" className="num">Waiting</th>
                    <th scope="col" className="num">Queued</th>
                    <th scope="col" className="num">Running</th>
                    <th scope="col" className="num">Weight</th>
                    <th scope="col">Paused</th>
                    {admin && <th scope="col">Actions</th>}
                  </tr>
                </thead>
                <tbody>
                  {data.groups.map((g) => (
                    <tr key={g.name} data-group={g.name} data-paused={String(g.paused ?? false)}>
                      <th scope="row" className="mono">{g.name}</th>
                      <td className="num">{count(g.waiting)}</td>
                      <td className="num">{count(g.queued)}</td>
                      <td className="num">{count(g.running)}</td>
                      <td className="num" data-weight={g.weight ?? 1}>{count(g.weight ?? 1)}</td>
                      <td>{g.paused ? <span className="badge paused">paused</span> : <span className="muted">no</span>}</td>
                      {admin && (
                        <td className="actions">
                          {g.paused ? (
                            <button
                              type="button"
                              disabled={busy !== null || page.stale}
                              onClick={() =>
                                void act(`Resume group ${g.name}`, async () => (await changeGroup(queue, g.name, { paused: false }), `Group ${g.name} resumed`))
                              }
                            >
                              Resume
                            </button>
                          ) : (
                            <button
                              type="button"
                              disabled={busy !== null || page.stale}
                              onClick={() =>
                                void act(`Pause group ${g.name}`, async () => (await changeGroup(queue, g.name, { paused: true }), `Group ${g.name} paused`))
                              }
                            >
                              Pause
                            </button>
                          )}
                          <button
                            type="button"
                            disabled={busy !== null || page.stale}
                            onClick={() => {
                              setWeight(String(g.weight ?? 1));
                              setWeighing(g);
                            }}
                          >
                            Weight…
                          </button>
                        </td>
                      )}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
            <Pager cursors={cursors} setCursors={setCursors} next={data.next_cursor} labels={["← Previous", "Next →"]} />
          </>
        )}
      </Loaded>
      {weighing !== null && (
        <ConfirmDialog
          open
          title={`Weight of group ${weighing.name}`}
          confirmLabel="Save weight"
          onCancel={() => setWeighing(null)}
          onConfirm={() => {
            const g = weighing;
            setWeighing(null);
            const body = { weight: weightBody() };
            void act(`Weight of group ${g.name}`, async () => `Group ${g.name} now has weight ${count((await changeGroup(queue, g.name, body)).weight)}`);
          }}
        >
          <p className="hint">The turns the group gets for another&apos;s one: 1 to 100 (default 1).</p>
          <form className="limits" onSubmit={(e) => e.preventDefault()}>
            <label>
              Weight
              <input name="weight" inputMode="numeric" value={weight} onChange={(e) => setWeight(e.target.value)} />
            </label>
          </form>
        </ConfirmDialog>
      )}
    </section>
  );
}
