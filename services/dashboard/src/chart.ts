// What the charts draw, as pure functions (components/TimeChart.tsx draws them with uPlot):
// the line patterns that tell series apart without colour, the time axis' labels, the y axis'
// bound and steps, and which values stand alone.

export type Tone = "ok" | "bad" | "warn" | "info" | "muted";
export type Pattern = "solid" | "dashed" | "dotted" | "dashdot";

/** Line patterns (canvas setLineDash and SVG stroke-dasharray), in px. */
export const PATTERNS: Record<Pattern, number[]> = {
  solid: [],
  dashed: [8, 4],
  dotted: [2, 3],
  dashdot: [10, 3, 2, 3],
};

/** Steps of a y axis that counts things: whole numbers only. */
export const WHOLE_STEPS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];

/** Time-axis labels in UTC, 24-hour: `14:30`, with the date under the first label and under
 * the first one of each new day. */
export function timeLabels(splits: number[]): string[] {
  let day = "";
  return splits.map((ts) => {
    const iso = new Date(ts * 1000).toISOString();
    const hm = iso.slice(11, 16);
    const today = iso.slice(0, 10);
    if (today === day) return hm;
    day = today;
    return `${hm}\n${today}`;
  });
}

/** The indices of values with no value on either side: a line has nothing to join them to, so
 * they are drawn as points. */
export function lonePoints(values: ArrayLike<number | null | undefined>): number[] {
  const out: number[] = [];
  for (let i = 0; i < values.length; i += 1) {
    const alone = (values[i - 1] ?? null) === null && (values[i + 1] ?? null) === null;
    if ((values[i] ?? null) !== null && alone) out.push(i);
  }
  return out;
}

/** The last value that is not null (what "now" shows when no minute is pointed at). */
export function latest(values: (number | null)[]): { index: number; value: number } | null {
  for (let i = values.length - 1; i >= 0; i -= 1) {
    const v = values[i];
    if (v !== null && v !== undefined) return { index: i, value: v };
  }
  return null;
}

/** A round upper bound for the y axis (1 when everything is 0). */
export function niceMax(v: number | null): number {
  if (v === null || !(v > 0)) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * magnitude) return m * magnitude;
  return 10 * magnitude;
}
