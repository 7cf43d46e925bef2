// The live connection against a scripted WebSocket (the browser's own is not in Node): what it
// asks the gateway for, how it follows the frames, and how it reconnects and resumes.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type ConnectionState, type EventFrame, LiveConnection } from "./connection";

class ScriptedSocket {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSING = 2;
  static readonly CLOSED = 3;
  static made: ScriptedSocket[] = [];

  readonly url: URL;
  readyState = ScriptedSocket.CONNECTING;
  sent: string[] = [];
  closedWith: [number | undefined, string | undefined] | null = null;
  onmessage: ((message: { data: unknown }) => void) | null = null;
  onclose: ((close: { code: number }) => void) | null = null;
  onerror: (() => void) | null = null;

  constructor(url: string) {
    this.url = new URL(url);
    ScriptedSocket.made.push(this);
  }

  send(data: string): void {
    this.sent.push(data);
  }

  close(code?: number, reason?: string): void {
    this.closedWith = [code, reason];
    this.readyState = ScriptedSocket.CLOSED;
  }

  /** The gateway sends frames (one message, one JSON object per line, as with batch=1). */
  deliver(...frames: Partial<EventFrame>[]): void {
    this.readyState = ScriptedSocket.OPEN;
    this.onmessage?.({ data: frames.map((f) => JSON.stringify(f)).join("\n") });
  }

  /** The connection ends from the other side. */
  drop(code: number): void {
    this.readyState = ScriptedSocket.CLOSED;
    this.onclose?.({ code });
  }
}

function latest(): ScriptedSocket {
  const socket = ScriptedSocket.made.at(-1);
  if (!socket) throw new Error("no socket was opened");
  return socket;
}

function event(type: string, cursor: string, extra: Partial<EventFrame> = {}): Partial<EventFrame> {
  return { type, cursor, ts: 1, queue: "emails", task_id: `emails:${cursor}`, reason: null, ...extra };
}

let connection: LiveConnection;
let states: ConnectionState[];
let frames: EventFrame[];
let resyncs: string[];

beforeEach(() => {
  vi.useFakeTimers();
  ScriptedSocket.made = [];
  vi.stubGlobal("window", {
    location: { protocol: "https:", host: "dash.example" },
    setTimeout: globalThis.setTimeout,
    clearTimeout: globalThis.clearTimeout,
    setInterval: globalThis.setInterval,
    clearInterval: globalThis.clearInterval,
  });
  vi.stubGlobal("WebSocket", ScriptedSocket);
  connection = new LiveConnection();
  states = [];
  frames = [];
  resyncs = [];
  connection.onState((s) => states.push(s));
  connection.onEvent((f) => frames.push(f));
  connection.onResync((r) => resyncs.push(r));
});

afterEach(() => {
  connection.stop();
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

describe("LiveConnection", () => {
  it("asks for batched frames, looks back on its first subscription only, and carries the key", () => {
    connection.start("secret-key", 300);
    const first = latest().url;
    expect(`${first.protocol}//${first.host}${first.pathname}`).toBe("wss://dash.example/ws/events");
    expect(first.searchParams.get("batch")).toBe("1");
    expect(first.searchParams.get("since_s")).toBe("300");
    expect(first.searchParams.get("api_key")).toBe("secret-key");
    expect(first.searchParams.has("cursor")).toBe(false);
    expect(states.at(-1)).toEqual({ kind: "connecting" });

    latest().deliver({ type: "subscribed", cursor: null });
    expect(connection.getState().kind).toBe("live");
    latest().drop(1006); // no frame with a cursor yet: the next one starts live, no look back
    vi.advanceTimersByTime(5_000);
    expect(ScriptedSocket.made).toHaveLength(2);
    expect(latest().url.searchParams.has("since_s")).toBe(false);
    expect(latest().url.searchParams.has("cursor")).toBe(false);
  });

  it("hands on task events, not control frames, and resumes from the last cursor", () => {
    connection.start(null);
    expect(latest().url.searchParams.has("api_key")).toBe(false);
    latest().deliver(
      { type: "subscribed", cursor: null },
      event("task.queued", "emails:1-0"),
      event("task.started", "emails:2-0"),
      { type: "pong", cursor: null },
    );
    expect(frames.map((f) => f.type)).toEqual(["task.queued", "task.started"]);
    expect(connection.getCursor()).toBe("emails:2-0");

    latest().drop(1006);
    const waiting = connection.getState();
    expect(waiting.kind).toBe("reconnecting");
    if (waiting.kind === "reconnecting") {
      expect(waiting.attempt).toBe(1);
      expect(waiting.lastError).toBe("the gateway is unreachable");
    }
    vi.advanceTimersByTime(5_000);
    expect(latest().url.searchParams.get("cursor")).toBe("emails:2-0");
  });

  it("backs off longer with each failed attempt, up to a cap, and starts over once live", () => {
    connection.start(null);
    const delays: number[] = [];
    for (let i = 0; i < 6; i += 1) {
      const before = ScriptedSocket.made.length;
      latest().drop(1006);
      const state = connection.getState();
      if (state.kind !== "reconnecting") throw new Error(`not reconnecting: ${state.kind}`);
      expect(state.attempt).toBe(i + 1);
      delays.push(state.retryAt - Date.now());
      vi.advanceTimersByTime(3_001);
      expect(ScriptedSocket.made).toHaveLength(before + 1);
    }
    // Jittered in [base/2, base]: 250, 500, 1000, 2000, then capped at 3000 ms.
    expect(delays[0]).toBeLessThanOrEqual(250);
    expect(delays[3]).toBeGreaterThanOrEqual(1000);
    expect(Math.max(...delays)).toBeLessThanOrEqual(3000);
    latest().deliver({ type: "subscribed", cursor: null });
    latest().drop(1006);
    const again = connection.getState();
    expect(again.kind === "reconnecting" && again.attempt).toBe(1);
  });

  it("asks for a re-read on a gap, and when the gateway refuses its cursor starts live", () => {
    connection.start(null);
    latest().deliver({ type: "subscribed", cursor: null }, event("task.queued", "emails:5-0"));
    latest().deliver({ type: "gap", cursor: null, reason: "slow_consumer" });
    expect(resyncs).toEqual(["slow_consumer"]);

    latest().drop(1008); // policy violation: the cursor was not one the gateway issued
    expect(resyncs).toEqual(["slow_consumer", "cursor_refused"]);
    expect(connection.getCursor()).toBeNull();
    vi.advanceTimersByTime(5_000);
    expect(latest().url.searchParams.has("cursor")).toBe(false);
  });

  it("reports Redis trouble the gateway reports, and its recovery", () => {
    connection.start(null);
    latest().deliver({ type: "subscribed", cursor: null });
    latest().deliver({ type: "degraded", cursor: null, reason: "redis_unavailable" });
    expect(connection.getState()).toEqual({ kind: "degraded", reason: "redis_unavailable" });
    latest().deliver({ type: "recovered", cursor: null });
    expect(connection.getState().kind).toBe("live");
  });

  it("pings while live and closes a socket that has gone silent", () => {
    connection.start(null);
    const socket = latest();
    socket.deliver({ type: "subscribed", cursor: null });
    vi.advanceTimersByTime(20_000);
    expect(socket.sent).toEqual([JSON.stringify({ type: "ping" })]);
    vi.advanceTimersByTime(40_000); // no frame for 60 s, past the 45 s of silence allowed
    expect(socket.closedWith).toEqual([4000, "silent"]);
  });

  it("stops for good: no reconnect after stop", () => {
    connection.start(null);
    const socket = latest();
    connection.stop();
    expect(socket.closedWith).toEqual([1000, "bye"]);
    socket.drop(1000);
    vi.advanceTimersByTime(10_000);
    expect(ScriptedSocket.made).toHaveLength(1);
  });
});
