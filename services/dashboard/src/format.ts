// Numbers and times as people read them: units, relative times, thousands separators.

const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const oneDecimal = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });

export function count(n: number | null | undefined): string {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return integer.format(n);
}

export function rate(perSecond: number): string {
  if (perSecond === 0) return "0/s";
  if (perSecond < 1) return `${oneDecimal.format(perSecond * 60)}/min`;
  return `${oneDecimal.format(perSecond)}/s`;
}

/** A duration in seconds: "350 ms", "2.4 s", "3 min 5 s", "2 h 10 min", "3 d 4 h". */
export function duration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.abs(seconds);
  if (s === 0) return "0 ms";
  if (s < 0.01) return `${oneDecimal.format(s * 1000)} ms`;
  if (s < 1) return `${integer.format(s * 1000)} ms`;
  if (s < 60) return `${oneDecimal.format(s)} s`;
  if (s < 3600) {
    const m = Math.floor(s / 60);
    const rest = Math.floor(s % 60);
    return rest ? `${m} min ${rest} s` : `${m} min`;
  }
  if (s < 86400) {
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    return m ? `${h} h ${m} min` : `${h} h`;
  }
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  return h ? `${d} d ${h} h` : `${d} d`;
}

/**
 * Milliseconds since the epoch from an RFC 3339 string, a Date, a number of ms, or a string of
 * digits (the error history stores microseconds; the unit is told by the magnitude).
 */
export function toMs(at: Date | number | string | null | undefined): number {
  if (at === null || at === undefined) return Number.NaN;
  if (at instanceof Date) return at.getTime();
  if (typeof at === "number") return at;
  if (/^\d+(\.\d+)?$/.test(at)) {
    const n = Number(at);
    return n > 1e14 ? n / 1000 : n > 1e11 ? n : n * 1000;
  }
  return Date.parse(at);
}

/** "12 s ago", "in 4 min", "just now", relative to `now` (ms). */
export function relative(at: Date | number | string | null | undefined, now: number): string {
  if (at === null || at === undefined) return "–";
  const t = toMs(at);
  if (Number.isNaN(t)) return "–";
  const delta = (t - now) / 1000;
  if (Math.abs(delta) < 1.5) return "just now";
  return delta < 0 ? `${duration(-delta)} ago` : `in ${duration(delta)}`;
}

export function absolute(at: Date | number | string | null | undefined): string {
  const ms = toMs(at);
  if (Number.isNaN(ms)) return "";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function percent(value: number): string {
  return `${integer.format(Math.round(value * 100))}%`;
}

/** A JSON value as text for a <pre> (never as HTML). */
export function json(value: unknown): string {
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export function shortId(id: string): string {
  const [queue, hex] = id.split(":");
  return hex && hex.length > 12 ? `${queue}:${hex.slice(0, 8)}…` : id;
}
