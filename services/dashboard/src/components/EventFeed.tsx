// The live event feed: newest first, each event with its task, queue and relative time.
import type { EventFrame } from "../live/connection";
import { shortId } from "../format";
import { Link, taskPath } from "../router";
import { Empty, RelTime } from "./ui";

export function EventFeed({ frames, limit }: { frames: EventFrame[]; limit: number }) {
  if (frames.length === 0) {
    return (
      <Empty title="No events yet">
        Events appear here as they happen: submit a task and watch it go from queued to succeeded.
      </Empty>
    );
  }
  return (
    <ol className="feed" aria-label="Latest events, newest first">
      {frames.slice(0, limit).map((f) => (
        <li key={`${f.cursor ?? ""}|${f.type}|${f.task_id ?? ""}`} className="feed-item" data-type={f.type} data-task={f.task_id ?? undefined}>
          <span className={`badge ev ev-${f.type.replace(".", "-")}`}>{f.type.replace(/^task\./, "")}</span>
          <span className="feed-main">
            {f.task_id ? (
              <Link to={taskPath(f.task_id)} title={f.task_id}>
                {f.task ?? shortId(f.task_id)}
              </Link>
            ) : (
              <span>{f.worker ?? f.queue ?? ""}</span>
            )}
            <span className="muted">
              {" "}
              {f.queue ?? ""}
              {f.attempt ? ` · attempt ${f.attempt}` : ""}
              {f.reason ? ` · ${f.reason}` : ""}
            </span>
          </span>
          <RelTime at={f.ts !== null ? f.ts * 1000 : null} />
        </li>
      ))}
    </ol>
  );
}
