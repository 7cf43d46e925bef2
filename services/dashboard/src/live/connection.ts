// The one WebSocket to the event gateway: every view listens to it. Its first subscription
// looks back (?since_s=): the live figures cover the minutes before the page opened too. It
// resumes from the last cursor after a disconnect (the gateway replays what was missed), and
// reports its state.

export type EventFrame = {
  type: string;
  cursor: string | null;
  ts: number | null;
  queue: string | null;
  task_id: string | null;
  task: string | null;
  attempt: number | null;
  worker: string | null;
  reason: string | null;
  data: Record<string, unknown> | null;
};

export type ConnectionState =
  | { kind: "connecting" }
  | { kind: "live"; since: number }
  | { kind: "degraded"; reason: string }
  | { kind: "reconnecting"; attempt: number; retryAt: number; lastError: string };

/** Frames about the connection itself, not about tasks. */
export const CONTROL_FRAMES: ReadonlySet<string> = new Set([
  "subscribed",
  "gap",
  "degraded",
  "recovered",
  "pong",
]);

type EventListener = (frame: EventFrame) => void;
type StateListener = (state: ConnectionState) => void;
type ResyncListener = (reason: string) => void;

const FIRST_RETRY_MS = 250;
const MAX_RETRY_MS = 3000;
/** No frame and no pong for this long while "live": the socket is presumed dead. */
const SILENCE_MS = 45_000;
const PING_EVERY_MS = 20_000;

export class LiveConnection {
  private socket: WebSocket | null = null;
  private cursor: string | null = null;
  private attempt = 0;
  private retryTimer: number | undefined;
  private pingTimer: number | undefined;
  private lastFrameAt = 0;
  private stopped = true;
  private apiKey: string | null = null;
  private lookBackS = 0;
  /** A subscription that looked back was made: never again (its events are counted). */
  private lookedBack = false;
  private state: ConnectionState = { kind: "connecting" };
  private readonly events = new Set<EventListener>();
  private readonly states = new Set<StateListener>();
  private readonly resyncs = new Set<ResyncListener>();

  /** Connect; the first subscription starts ``lookBackS`` seconds back (0: live). */
  start(apiKey: string | null, lookBackS = 0): void {
    this.apiKey = apiKey;
    this.lookBackS = lookBackS;
    this.stopped = false;
    this.open();
  }

  stop(): void {
    this.stopped = true;
    window.clearTimeout(this.retryTimer);
    window.clearInterval(this.pingTimer);
    const socket = this.socket;
    this.socket = null;
    socket?.close(1000, "bye");
  }

  getState(): ConnectionState {
    return this.state;
  }

  /** The position to resume from: the cursor of the last frame received. */
  getCursor(): string | null {
    return this.cursor;
  }

  onEvent(listener: EventListener): () => void {
    this.events.add(listener);
    return () => this.events.delete(listener);
  }

  onState(listener: StateListener): () => void {
    this.states.add(listener);
    return () => this.states.delete(listener);
  }

  /** Called when events may have been missed (a gap): re-read state instead of trusting it. */
  onResync(listener: ResyncListener): () => void {
    this.resyncs.add(listener);
    return () => this.resyncs.delete(listener);
  }

  private url(): string {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const params = new URLSearchParams({ batch: "1" });
    if (this.cursor) params.set("cursor", this.cursor);
    else if (this.lookBackS > 0 && !this.lookedBack) params.set("since_s", String(this.lookBackS));
    // Browsers cannot set headers on a WebSocket: the gateway takes the key here.
    if (this.apiKey) params.set("api_key", this.apiKey);
    return `${scheme}://${window.location.host}/ws/events?${params.toString()}`;
  }

  private setState(state: ConnectionState): void {
    this.state = state;
    for (const listener of this.states) listener(state);
  }

  private open(): void {
    if (this.stopped) return;
    if (this.state.kind !== "reconnecting") this.setState({ kind: "connecting" });
    const socket = new WebSocket(this.url());
    this.socket = socket;
    socket.onmessage = (message) => {
      if (this.socket !== socket) return;
      this.lastFrameAt = Date.now();
      const text = typeof message.data === "string" ? message.data : "";
      for (const line of text.split("\n")) {
        if (line) this.handle(JSON.parse(line) as EventFrame);
      }
    };
    socket.onclose = (close) => {
      if (this.socket !== socket) return;
      this.socket = null;
      window.clearInterval(this.pingTimer);
      if (close.code === 1008 && this.cursor) {
        // The gateway refused our cursor (it did not issue it): start live, re-read state.
        this.cursor = null;
        this.emitResync("cursor_refused");
      }
      this.scheduleRetry(close.code === 1006 ? "the gateway is unreachable" : `closed (${close.code})`);
    };
    // Errors are followed by a close event, which schedules the retry.
    socket.onerror = () => undefined;
  }

  private handle(frame: EventFrame): void {
    if (frame.cursor) this.cursor = frame.cursor;
    switch (frame.type) {
      case "subscribed":
        this.lookedBack = true;
        this.attempt = 0;
        this.setState({ kind: "live", since: Date.now() });
        this.startPinging();
        break;
      case "recovered":
        this.attempt = 0;
        this.setState({ kind: "live", since: Date.now() });
        this.startPinging();
        break;
      case "degraded":
        this.setState({ kind: "degraded", reason: frame.reason ?? "redis_unavailable" });
        break;
      case "gap":
        this.emitResync(frame.reason ?? "gap");
        break;
      default:
        break;
    }
    if (!CONTROL_FRAMES.has(frame.type)) {
      for (const listener of this.events) listener(frame);
    }
  }

  private startPinging(): void {
    window.clearInterval(this.pingTimer);
    this.pingTimer = window.setInterval(() => {
      const socket = this.socket;
      if (!socket || socket.readyState !== WebSocket.OPEN) return;
      if (Date.now() - this.lastFrameAt > SILENCE_MS) {
        socket.close(4000, "silent");
        return;
      }
      socket.send(JSON.stringify({ type: "ping" }));
    }, PING_EVERY_MS);
  }

  private scheduleRetry(lastError: string): void {
    if (this.stopped) return;
    this.attempt += 1;
    const base = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** (this.attempt - 1));
    const delay = base / 2 + Math.random() * (base / 2);
    this.setState({
      kind: "reconnecting",
      attempt: this.attempt,
      retryAt: Date.now() + delay,
      lastError,
    });
    window.clearTimeout(this.retryTimer);
    this.retryTimer = window.setTimeout(() => this.open(), delay);
  }

  private emitResync(reason: string): void {
    for (const listener of this.resyncs) listener(reason);
  }
}
