// A chart of a few series over time, drawn by uPlot: a time axis, a y axis in the figure's
// unit, and a legend of our own under it that tells the series apart without colour (each
// series' line pattern drawn next to its name) and shows their values at the minute under the
// pointer, or under the keyboard's cursor (arrow keys, Home, End), else the latest.
import { type KeyboardEvent, useEffect, useMemo, useRef, useState } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { latest, lonePoints, niceMax, PATTERNS, type Pattern, type Tone, timeLabels, WHOLE_STEPS } from "../chart";
import { absolute } from "../format";

export type ChartSeries = {
  label: string;
  values: (number | null)[];
  tone: Tone;
  pattern: Pattern;
};

const HEIGHT = 190;

function cssColour(element: Element, tone: Tone | "border" | "text"): string {
  const name = tone === "text" ? "--text" : tone === "border" ? "--border" : `--${tone}`;
  return getComputedStyle(element).getPropertyValue(name).trim() || "#666";
}

export function TimeChart({
  title,
  unit,
  times,
  series,
  format,
  summary,
  whole = false,
}: {
  title: string;
  /** What the y axis counts, for its label and screen readers: "tasks per minute". */
  unit: string;
  /** The points' times in seconds since the epoch. */
  times: number[];
  series: ChartSeries[];
  format: (v: number) => string;
  /** What a screen reader hears about the chart as a whole. */
  summary: string;
  /** The values count things: the y axis steps by whole numbers. */
  whole?: boolean;
}) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const formatRef = useRef(format);
  formatRef.current = format;
  const [cursor, setCursor] = useState<number | null>(null);
  // The chart is made again when its series change in kind, not when their values do.
  const shape = series.map((s) => `${s.label}|${s.tone}|${s.pattern}`).join(",");
  const data = useMemo(() => [times, ...series.map((s) => s.values)] as uPlot.AlignedData, [times, series]);
  const dataRef = useRef(data);
  dataRef.current = data;

  useEffect(() => {
    const element = box.current;
    if (!element) return undefined;
    const text = cssColour(element, "muted");
    const grid = cssColour(element, "border");
    const axis = {
      stroke: text,
      grid: { stroke: grid, width: 1 },
      ticks: { stroke: grid, width: 1 },
      font: "11px system-ui, sans-serif",
    };
    const u = new uPlot(
      {
        width: Math.max(200, element.clientWidth),
        height: HEIGHT,
        legend: { show: false },
        cursor: { drag: { x: false, y: false }, points: { size: 7 } },
        // Times in UTC, as everywhere in the dashboard (format.ts `absolute`).
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, niceMax(max)] } },
        axes: [
          { ...axis, values: (_u, splits) => timeLabels(splits) },
          {
            ...axis,
            size: 56,
            ...(whole ? { incrs: WHOLE_STEPS } : {}),
            values: (_u, ticks) => ticks.map((t) => formatRef.current(t)),
          },
        ],
        series: [
          {},
          ...series.map((s) => ({
            label: s.label,
            stroke: cssColour(element, s.tone),
            width: 2,
            dash: PATTERNS[s.pattern],
            spanGaps: false,
            // Points where there are few enough to see, and always where one stands alone.
            points: {
              size: 5,
              filter: (self: uPlot, si: number, show: boolean) => (show ? null : lonePoints(self.data[si] ?? [])),
            },
          })),
        ],
        hooks: { setCursor: [(self: uPlot) => setCursor(self.cursor.idx ?? null)] },
      },
      dataRef.current,
      element,
    );
    plot.current = u;
    const observer = new ResizeObserver(([entry]) => {
      if (entry) u.setSize({ width: Math.max(200, Math.round(entry.contentRect.width)), height: HEIGHT });
    });
    observer.observe(element);
    return () => {
      observer.disconnect();
      u.destroy();
      plot.current = null;
    };
    // `series` is read through `shape`: the chart is made again only when that changes.
  }, [shape, whole]);

  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);

  const moveCursor = (index: number | null) => {
    const u = plot.current;
    if (!u) return;
    if (index === null) {
      u.setCursor({ left: -10, top: -10 });
      return;
    }
    const i = Math.max(0, Math.min(times.length - 1, index));
    u.setCursor({ left: u.valToPos(times[i] ?? 0, "x"), top: u.bbox.height / devicePixelRatio / 2 });
  };

  const onKey = (e: KeyboardEvent) => {
    const last = times.length - 1;
    const at = cursor ?? last;
    const to =
      e.key === "ArrowLeft" ? at - 1 : e.key === "ArrowRight" ? at + 1 : e.key === "Home" ? 0 : e.key === "End" ? last : null;
    if (to === null) return;
    e.preventDefault();
    moveCursor(to);
  };

  const shown = cursor !== null && cursor >= 0 && cursor < times.length ? cursor : null;
  const when = shown !== null ? absolute((times[shown] ?? 0) * 1000).replace(/:00 UTC$/, " UTC") : "now";
  return (
    <figure className="chart" data-chart={title}>
      <figcaption>
        <span className="chart-title">{title}</span>
        <span className="chart-unit">{unit}</span>
      </figcaption>
      <div
        ref={box}
        className="chart-plot"
        role="img"
        aria-label={`${title}, ${unit}. ${summary}`}
        tabIndex={0}
        onKeyDown={onKey}
        onBlur={() => moveCursor(null)}
      />
      <ul className="chart-legend" aria-label={`${title} at ${when}`}>
        {series.map((s) => {
          const point = shown !== null ? s.values[shown] ?? null : (latest(s.values)?.value ?? null);
          return (
            <li key={s.label} className={`legend-item tone-${s.tone}`} data-series={s.label}>
              <svg className="legend-line" width="28" height="10" aria-hidden="true" focusable="false">
                <line x1="1" y1="5" x2="27" y2="5" strokeDasharray={PATTERNS[s.pattern].join(" ") || undefined} />
              </svg>
              <span className="legend-label">{s.label}</span>{" "}
              <span className="legend-value">{point === null ? "–" : format(point)}</span>
            </li>
          );
        })}
        <li className="legend-when">{when}</li>
      </ul>
    </figure>
  );
}
