// A workflow's steps as a graph: one column per depth (the longest path from a step that waits
// for none), an edge from each step it waits for. A column taller than MAX_ROWS wraps into
// side-by-side sub-columns, whose edges leave and enter at the column's sides (a chord of 200
// draws 20 lines into its callback, none across other steps); the drawing scrolls in its frame.
import type { WorkflowStep } from "../api/types";
import { count } from "../format";
import { Link, taskPath } from "../router";

const NODE_W = 190;
const NODE_H = 54;
const GAP_X = 56;
const SUB_GAP_X = 12;
const GAP_Y = 10;
const MAX_ROWS = 20;
const PAD = 8;

const ICONS: Record<string, string> = {
  pending: "◌",
  scheduled: "◷",
  queued: "○",
  running: "▶",
  retrying: "↻",
  succeeded: "✓",
  dead: "✕",
  failed: "✕",
  cancelled: "⊘",
  expired: "⌛",
};

function statusIcon(status: string): string {
  return ICONS[status] ?? "•";
}

/** A step's place, and its column's left and right edges. */
type Placed = { step: WorkflowStep; x: number; y: number; depth: number; left: number; right: number };
type Layout = { nodes: Placed[]; width: number; height: number; depths: number };

/** Each step's depth: 0 without inputs, else one more than its deepest input. */
function depthsOf(steps: WorkflowStep[]): Map<number, number> {
  const byIndex = new Map(steps.map((s) => [s.step, s]));
  const depth = new Map<number, number>();
  const visiting = new Set<number>();
  const visit = (index: number): number => {
    const known = depth.get(index);
    if (known !== undefined) return known;
    const step = byIndex.get(index);
    if (!step || visiting.has(index)) return -1;
    visiting.add(index);
    const d = Math.max(-1, ...step.depends_on.map(visit)) + 1;
    visiting.delete(index);
    depth.set(index, d);
    return d;
  };
  for (const s of steps) visit(s.step);
  return depth;
}

function layout(steps: WorkflowStep[]): Layout {
  const depth = depthsOf(steps);
  const columns: WorkflowStep[][] = [];
  for (const s of [...steps].sort((a, b) => a.step - b.step)) {
    const d = depth.get(s.step) ?? 0;
    (columns[d] ??= []).push(s);
  }
  const rowsOf = (column: WorkflowStep[] | undefined) => Math.min(MAX_ROWS, column?.length ?? 0);
  const maxRows = Math.max(1, ...columns.map(rowsOf));
  const rowOf = new Map<number, number>();
  const nodes: Placed[] = [];
  let x = PAD;
  columns.forEach((column, d) => {
    // Each step near the rows of its inputs: fewer crossing edges.
    const near = (s: WorkflowStep) => {
      const rows = s.depends_on.map((i) => rowOf.get(i)).filter((r): r is number => r !== undefined);
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : s.step;
    };
    const ordered = d === 0 ? column : [...column].sort((a, b) => near(a) - near(b) || a.step - b.step);
    const rows = rowsOf(ordered);
    const top = PAD + ((maxRows - rows) * (NODE_H + GAP_Y)) / 2;
    const subs = Math.max(1, Math.ceil(ordered.length / rows));
    const right = x + subs * NODE_W + (subs - 1) * SUB_GAP_X;
    ordered.forEach((step, k) => {
      const sub = Math.floor(k / rows);
      const row = k % rows;
      rowOf.set(step.step, (maxRows - rows) / 2 + row);
      nodes.push({ step, depth: d, x: x + sub * (NODE_W + SUB_GAP_X), y: top + row * (NODE_H + GAP_Y), left: x, right });
    });
    x = right + GAP_X;
  });
  return {
    nodes,
    width: Math.max(NODE_W + 2 * PAD, x - GAP_X + PAD),
    height: maxRows * (NODE_H + GAP_Y) - GAP_Y + 2 * PAD,
    depths: columns.length,
  };
}

function edgePath(from: Placed, to: Placed): string {
  const x1 = from.right;
  const y1 = from.y + NODE_H / 2;
  const x2 = to.left;
  const y2 = to.y + NODE_H / 2;
  const bend = Math.max(24, (x2 - x1) / 2);
  return `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`;
}

const ENDED = new Set(["succeeded", "dead", "failed", "cancelled", "expired"]);

function StepNode({ step, failed }: { step: WorkflowStep; failed: boolean }) {
  const waits = step.depends_on.length ? `, waits for step${step.depends_on.length > 1 ? "s" : ""} ${step.depends_on.join(", ")}` : "";
  const label = `Step ${step.step}: ${step.task}, ${step.status}${failed ? ", failed the workflow" : ""}${waits}`;
  const body = (
    <>
      <span className="wf-node-title">
        <span className="wf-step-index">#{step.step}</span> <span className="wf-task">{step.task}</span>
      </span>
      <span className="wf-node-status">
        <span aria-hidden="true">{statusIcon(step.status)}</span> {step.status}
        {step.attempts > 1 ? ` · ${count(step.attempts)} attempts` : ""}
        {failed ? <strong className="wf-failed-mark"> · failed it</strong> : null}
      </span>
      {waits && <span className="visually-hidden">{waits}</span>}
    </>
  );
  const className = `wf-node status-${step.status}${failed ? " failed-step" : ""}`;
  return step.task_id ? (
    <Link to={taskPath(step.task_id)} className={className} title={label}>
      {body}
    </Link>
  ) : (
    <span className={className} title={label}>
      {body}
    </span>
  );
}

/** One path per distinct line (steps of a wrapped column in one row share theirs); it is
 * drawn as ended once every step it stands for has ended. */
function edges(nodes: Placed[], at: Map<number, Placed>): { d: string; ended: boolean }[] {
  const paths = new Map<string, boolean>();
  for (const to of nodes) {
    for (const i of to.step.depends_on) {
      const from = at.get(i);
      if (!from) continue;
      const d = edgePath(from, to);
      paths.set(d, (paths.get(d) ?? true) && ENDED.has(from.step.status));
    }
  }
  return [...paths].map(([d, ended]) => ({ d, ended }));
}

export function WorkflowGraph({ steps, failedStep }: { steps: WorkflowStep[]; failedStep: number | null | undefined }) {
  const { nodes, width, height, depths } = layout(steps);
  const at = new Map(nodes.map((n) => [n.step.step, n]));
  return (
    <div className="wf-graph" tabIndex={0} role="region" aria-label={`Step graph: ${count(steps.length)} steps in ${count(depths)} columns`}>
      <div className="wf-canvas" style={{ width, height }}>
        <svg width={width} height={height} aria-hidden="true" className="wf-edges">
          {edges(nodes, at).map((e) => (
            <path key={e.d} d={e.d} className={`wf-edge${e.ended ? " ended" : ""}`} />
          ))}
        </svg>
        <ol className="wf-nodes">
          {nodes.map((n) => (
            <li
              key={n.step.step}
              data-step={n.step.step}
              data-status={n.step.status}
              data-depth={n.depth}
              style={{ left: n.x, top: n.y, width: NODE_W, height: NODE_H }}
            >
              <StepNode step={n.step} failed={failedStep === n.step.step} />
            </li>
          ))}
        </ol>
      </div>
    </div>
  );
}
