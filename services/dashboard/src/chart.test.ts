import { describe, expect, it } from "vitest";
import { latest, lonePoints, niceMax, PATTERNS, timeLabels } from "./chart";

describe("chart marks", () => {
  it("gives every pattern a distinct dash, so series differ without colour", () => {
    const dashes = Object.values(PATTERNS).map((d) => d.join(","));
    expect(new Set(dashes).size).toBe(dashes.length);
  });

  it("labels the time axis in UTC, 24-hour, with the date where a day starts", () => {
    const t = Date.parse("2026-03-01T23:30:00Z") / 1000;
    expect(timeLabels([t, t + 1800, t + 3600])).toEqual(["23:30\n2026-03-01", "00:00\n2026-03-02", "00:30"]);
    expect(timeLabels([])).toEqual([]);
  });

  it("finds the values a line cannot join, to draw them as points", () => {
    expect(lonePoints([null, 3, null, 4, 5, null, 0])).toEqual([1, 6]);
    expect(lonePoints([1])).toEqual([0]);
    expect(lonePoints(new Float64Array([1, 2]))).toEqual([]);
  });

  it("rounds the y axis up, and reads the latest value", () => {
    expect(niceMax(0)).toBe(1);
    expect(niceMax(null)).toBe(1);
    expect(niceMax(7)).toBe(10);
    expect(niceMax(0.12)).toBeCloseTo(0.2);
    expect(niceMax(2200)).toBe(2500);
    expect(latest([1, 2, null])).toEqual({ index: 1, value: 2 });
    expect(latest([null])).toBeNull();
  });
});
