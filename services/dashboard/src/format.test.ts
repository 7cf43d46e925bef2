import { describe, expect, it } from "vitest";
import { absolute, count, duration, json, percent, rate, relative, shortId, toMs } from "./format";

describe("count", () => {
  it("groups thousands and rounds", () => {
    expect(count(0)).toBe("0");
    expect(count(1234567)).toBe("1,234,567");
    expect(count(2.6)).toBe("3");
  });
  it("shows a dash for nothing", () => {
    expect(count(null)).toBe("–");
    expect(count(undefined)).toBe("–");
    expect(count(Number.NaN)).toBe("–");
  });
});

describe("rate", () => {
  it("is per second from one a second, per minute below", () => {
    expect(rate(0)).toBe("0/s");
    expect(rate(12.34)).toBe("12.3/s");
    expect(rate(1)).toBe("1/s");
    expect(rate(0.5)).toBe("30/min");
    expect(rate(1 / 60)).toBe("1/min");
  });
});

describe("duration", () => {
  it("picks the unit a person reads", () => {
    expect(duration(0)).toBe("0 ms");
    expect(duration(0.0042)).toBe("4.2 ms");
    expect(duration(0.35)).toBe("350 ms");
    expect(duration(2.44)).toBe("2.4 s");
    expect(duration(185)).toBe("3 min 5 s");
    expect(duration(180)).toBe("3 min");
    expect(duration(7800)).toBe("2 h 10 min");
    expect(duration(7200)).toBe("2 h");
    expect(duration(86400 * 3 + 3600 * 4)).toBe("3 d 4 h");
    expect(duration(86400)).toBe("1 d");
  });
  it("shows the size of a negative duration, and a dash for nothing", () => {
    expect(duration(-2.5)).toBe("2.5 s");
    expect(duration(null)).toBe("–");
    expect(duration(Number.NaN)).toBe("–");
  });
});

describe("toMs", () => {
  it("reads every form a time comes in", () => {
    expect(toMs(new Date(1_700_000_000_123))).toBe(1_700_000_000_123);
    expect(toMs(1_700_000_000_123)).toBe(1_700_000_000_123);
    expect(toMs("2023-11-14T22:13:20.123Z")).toBe(1_700_000_000_123);
    // Digits: the unit is told by the magnitude (the error history stores microseconds).
    expect(toMs("1700000000123456")).toBe(1_700_000_000_123.456);
    expect(toMs("1700000000123")).toBe(1_700_000_000_123);
    expect(toMs("1700000000")).toBe(1_700_000_000_000);
    expect(toMs(null)).toBeNaN();
    expect(toMs("not a time")).toBeNaN();
  });
});

describe("relative and absolute", () => {
  const now = Date.parse("2026-01-02T03:04:05Z");
  it("says how long ago or until, in words", () => {
    expect(relative(now - 500, now)).toBe("just now");
    expect(relative(now - 12_000, now)).toBe("12 s ago");
    expect(relative(now + 240_000, now)).toBe("in 4 min");
    expect(relative(null, now)).toBe("–");
    expect(relative("garbage", now)).toBe("–");
  });
  it("writes absolute times in UTC to the second", () => {
    expect(absolute(now)).toBe("2026-01-02 03:04:05 UTC");
    expect(absolute("2026-01-02T03:04:05.678Z")).toBe("2026-01-02 03:04:05 UTC");
    expect(absolute(undefined)).toBe("");
  });
});

describe("percent, json and shortId", () => {
  it("formats the small things", () => {
    expect(percent(0.256)).toBe("26%");
    expect(json({ a: [1] })).toBe('{\n  "a": [\n    1\n  ]\n}');
    expect(json(undefined)).toBe("");
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    expect(json(circular)).toBe("[object Object]");
    expect(shortId("emails:0123456789abcdef0123456789abcdef")).toBe("emails:01234567…");
    expect(shortId("emails:short")).toBe("emails:short");
  });
});
