// A hand-made SVG chart: a few series over time, with a labelled y axis and a readable summary
// for screen readers. It is drawn at the width it is given, so text keeps its size.
import { useEffect, useRef, useState } from "react";

export type Series = { name: string; className: string; values: (number | null)[] };

export function LineChart({
  title,
  series,
  unit,
  format,
  start,
  stepS,
}: {
  title: string;
  series: Series[];
  unit: string;
  format: (v: number) => string;
  start: number;
  stepS: number;
}) {
  const figure = useRef<HTMLElement>(null);
  const [width, setWidth] = useState(600);
  useEffect(() => {
    const element = figure.current;
    if (!element) return undefined;
    const observer = new ResizeObserver(([entry]) => {
      if (entry) setWidth(Math.max(200, Math.round(entry.contentRect.width)));
    });
    observer.observe(element);
    return () => observer.disconnect();
  }, []);
  const height = 180;
  const pad = { left: 56, right: 8, top: 10, bottom: 22 };
  const n = Math.max(1, ...series.map((s) => s.values.length));
  const all = series.flatMap((s) => s.values.filter((v): v is number => v !== null));
  const max = niceMax(Math.max(0, ...all));
  const x = (i: number) => pad.left + (i / Math.max(1, n - 1)) * (width - pad.left - pad.right);
  const y = (v: number) => pad.top + (1 - (max ? v / max : 0)) * (height - pad.top - pad.bottom);
  const ticks = [0, max / 2, max];
  const minutes = Math.round(((n - 1) * stepS) / 60);
  const summary = series
    .map((s) => {
      const last = [...s.values].reverse().find((v) => v !== null);
      return `${s.name}: ${last === undefined || last === null ? "no data" : format(last)}`;
    })
    .join(", ");
  return (
    <figure className="chart" ref={figure}>
      <figcaption>
        <span className="chart-title">{title}</span>
        <span className="legend">
          {series.map((s) => (
            <span key={s.name} className={`legend-item ${s.className}`}>
              {s.name}
            </span>
          ))}
        </span>
      </figcaption>
      <svg viewBox={`0 0 ${width} ${height}`} role="img" aria-label={`${title}, last ${minutes} minutes. ${summary}`} width={width} height={height}>
        {ticks.map((t) => (
          <g key={t}>
            <line className="grid" x1={pad.left} x2={width - pad.right} y1={y(t)} y2={y(t)} />
            <text className="axis" x={pad.left - 6} y={y(t) + 4} textAnchor="end">
              {format(t)}
            </text>
          </g>
        ))}
        <text className="axis" x={pad.left} y={height - 4}>
          −{minutes} min
        </text>
        <text className="axis" x={width - pad.right} y={height - 4} textAnchor="end">
          now
        </text>
        {series.map((s) => (
          <g key={s.name} className={s.className}>
            <path className="line" d={path(s.values, x, y)} />
            {s.values.map((v, i) =>
              v === null || (s.values[i - 1] ?? null) !== null || (s.values[i + 1] ?? null) !== null ? null : (
                // A lone value has no segment to draw: show it as a dot.
                <circle key={i} className="dot" cx={x(i)} cy={y(v)} r={3} />
              ),
            )}
          </g>
        ))}
      </svg>
      <span className="visually-hidden">
        {unit} since {new Date(start * 1000).toISOString()}
      </span>
    </figure>
  );
}

function path(values: (number | null)[], x: (i: number) => number, y: (v: number) => number): string {
  let d = "";
  let pen = false;
  values.forEach((v, i) => {
    if (v === null) {
      pen = false;
      return;
    }
    d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
    pen = true;
  });
  return d;
}

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * magnitude) return m * magnitude;
  return 10 * magnitude;
}
