// When a schedule fires next, computed the way the scheduler does (schedules.py): interval
// schedules tick at whole multiples of every_s since the epoch; cron schedules at their cron
// times in UTC (day-of-month and day-of-week are alternatives when both are restricted).

const ALIASES: Record<string, string> = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};

const NAMES: Record<string, number> = {
  jan: 1, feb: 2, mar: 3, apr: 4, may: 5, jun: 6, jul: 7, aug: 8, sep: 9, oct: 10, nov: 11, dec: 12,
  sun: 0, mon: 1, tue: 2, wed: 3, thu: 4, fri: 5, sat: 6,
};

type Field = { values: Set<number>; star: boolean };

function value(text: string): number {
  const named = NAMES[text.toLowerCase()];
  const n = named ?? Number(text);
  if (!Number.isInteger(n)) throw new Error(`bad cron value ${text}`);
  return n;
}

function field(text: string, min: number, max: number): Field {
  const values = new Set<number>();
  for (const part of text.split(",")) {
    const [range = "", stepText] = part.split("/");
    const step = stepText === undefined ? 1 : Number(stepText);
    if (!Number.isInteger(step) || step < 1) throw new Error(`bad cron step ${part}`);
    let lo = min;
    let hi = max;
    if (range !== "*") {
      const [a = "", b] = range.split("-");
      lo = value(a);
      hi = b === undefined ? (stepText === undefined ? lo : max) : value(b);
    }
    for (let v = lo; v <= hi; v += step) values.add(v);
  }
  return { values, star: text.startsWith("*") };
}

/** The next cron time strictly after `after` (ms), or null when none within ~5 years. */
export function nextCron(expression: string, after: number): Date | null {
  const text = ALIASES[expression.trim().toLowerCase()] ?? expression.trim();
  const parts = text.split(/\s+/);
  if (parts.length !== 5) return null;
  let minute: Field, hour: Field, dom: Field, month: Field, dow: Field;
  try {
    minute = field(parts[0] ?? "", 0, 59);
    hour = field(parts[1] ?? "", 0, 23);
    dom = field(parts[2] ?? "", 1, 31);
    month = field(parts[3] ?? "", 1, 12);
    dow = field(parts[4] ?? "", 0, 7);
  } catch {
    return null;
  }
  if (dow.values.has(7)) dow.values.add(0);
  const dayMatches = (d: Date): boolean => {
    const byDom = dom.values.has(d.getUTCDate());
    const byDow = dow.values.has(d.getUTCDay());
    if (dom.star || dow.star) return (dom.star || byDom) && (dow.star || byDow);
    return byDom || byDow;
  };
  const t = new Date(Math.floor(after / 60000) * 60000 + 60000);
  for (let i = 0; i < 200_000; i += 1) {
    if (t.getUTCFullYear() > new Date(after).getUTCFullYear() + 5) return null;
    if (!month.values.has(t.getUTCMonth() + 1)) {
      t.setUTCMonth(t.getUTCMonth() + 1, 1);
      t.setUTCHours(0, 0, 0, 0);
    } else if (!dayMatches(t)) {
      t.setUTCDate(t.getUTCDate() + 1);
      t.setUTCHours(0, 0, 0, 0);
    } else if (!hour.values.has(t.getUTCHours())) {
      t.setUTCHours(t.getUTCHours() + 1, 0, 0, 0);
    } else if (!minute.values.has(t.getUTCMinutes())) {
      t.setUTCMinutes(t.getUTCMinutes() + 1, 0, 0);
    } else {
      return t;
    }
  }
  return null;
}

export function nextFire(
  schedule: { cron?: string | null; every_s?: number | null },
  now: number,
): Date | null {
  if (schedule.every_s) {
    const every = schedule.every_s * 1000;
    return new Date((Math.floor(now / every) + 1) * every);
  }
  return schedule.cron ? nextCron(schedule.cron, now) : null;
}
