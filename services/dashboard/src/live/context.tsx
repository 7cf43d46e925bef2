// React side of the live connection: one provider, hooks for state, events and data that is
// re-read when an event says it changed.
import {
  createContext,
  useCallback,
  useContext,
  useEffect,
  useRef,
  useState,
  useSyncExternalStore,
  type ReactNode,
} from "react";
import { type ConnectionState, type EventFrame, LiveConnection } from "./connection";
import { BUCKET_S, LiveStats, type Snapshot, WINDOW_BUCKETS } from "./stats";

type Live = { connection: LiveConnection; stats: LiveStats };

const LiveContext = createContext<Live | null>(null);

export function LiveProvider({ apiKey, children }: { apiKey: string | null; children: ReactNode }) {
  const [live] = useState<Live>(() => ({ connection: new LiveConnection(), stats: new LiveStats() }));
  useEffect(() => {
    const { connection, stats } = live;
    const off = connection.onEvent((frame) => stats.add(frame));
    // The figures cover a window of five minutes: the first subscription replays it.
    connection.start(apiKey, WINDOW_BUCKETS * BUCKET_S);
    const clock = window.setInterval(() => stats.tick(), 5000);
    return () => {
      off();
      window.clearInterval(clock);
      connection.stop();
    };
  }, [live, apiKey]);
  return <LiveContext.Provider value={live}>{children}</LiveContext.Provider>;
}

function useLive(): Live {
  const live = useContext(LiveContext);
  if (!live) throw new Error("useLive outside LiveProvider");
  return live;
}

export function useConnectionState(): ConnectionState {
  const { connection } = useLive();
  return useSyncExternalStore(
    (notify) => connection.onState(notify),
    () => connection.getState(),
  );
}

export function useLiveStats(): Snapshot {
  const { stats } = useLive();
  return useSyncExternalStore(
    (notify) => stats.subscribe(notify),
    () => stats.getSnapshot(),
  );
}

/** Calls `handler` for every task/queue/worker event while the component is mounted. */
export function useLiveEvents(handler: (frame: EventFrame) => void): void {
  const { connection } = useLive();
  const ref = useRef(handler);
  ref.current = handler;
  useEffect(() => connection.onEvent((frame) => ref.current(frame)), [connection]);
}

/** Calls `handler` when events may have been missed (gap, refused cursor). */
export function useResync(handler: (reason: string) => void): void {
  const { connection } = useLive();
  const ref = useRef(handler);
  ref.current = handler;
  useEffect(() => connection.onResync((reason) => ref.current(reason)), [connection]);
}

export type Resource<T> = {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
  /** Replace the data in place (live updates from events); a read in flight makes the same
   * change on its answer when it lands. */
  mutate: (update: (current: T) => T) => void;
};

type ResourceOptions = {
  /** Re-read when an event matches (debounced). */
  match?: (frame: EventFrame) => boolean;
  debounceMs?: number;
  /** Re-read on a timer too: only for state that no event announces (worker heartbeats). */
  intervalMs?: number;
};

/**
 * Data loaded from the API and re-read when the live events say it changed. `key` names the
 * request: a new key loads afresh.
 */
export function useResource<T>(
  key: string,
  load: () => Promise<T>,
  options: ResourceOptions = {},
): Resource<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [loading, setLoading] = useState(true);
  const loadRef = useRef(load);
  loadRef.current = load;
  const optionsRef = useRef(options);
  optionsRef.current = options;
  const generation = useRef(0);
  const timer = useRef<number | undefined>(undefined);
  const inFlight = useRef(false);
  const again = useRef(false);
  const loaded = useRef(false);
  /** The live changes made while each read in flight was on its way, one list per read. */
  const recorders = useRef(new Set<((current: T) => T)[]>());

  const run = useCallback(() => {
    if (inFlight.current) {
      again.current = true;
      return;
    }
    inFlight.current = true;
    const mine = generation.current;
    // The answer is read at some moment after this; live changes made meanwhile are made
    // again on it, or it would undo them (a row added by an event vanished when a re-read
    // that had left before the event answered after it).
    const changes: ((current: T) => T)[] = [];
    recorders.current.add(changes);
    loadRef
      .current()
      .then(
        (value) => {
          if (mine !== generation.current) return;
          loaded.current = true;
          setData(changes.reduce((current, change) => change(current), value));
          setError(undefined);
        },
        (e: unknown) => {
          if (mine !== generation.current) return;
          setError(e);
        },
      )
      .finally(() => {
        recorders.current.delete(changes);
        inFlight.current = false;
        if (mine === generation.current) setLoading(false);
        if (again.current) {
          again.current = false;
          run();
        }
      });
  }, []);

  const schedule = useCallback(() => {
    if (timer.current !== undefined) return;
    timer.current = window.setTimeout(() => {
      timer.current = undefined;
      run();
    }, optionsRef.current.debounceMs ?? 500);
  }, [run]);

  useEffect(() => {
    generation.current += 1;
    recorders.current.clear();
    loaded.current = false;
    inFlight.current = false;
    again.current = false;
    setLoading(true);
    setData(undefined);
    setError(undefined);
    run();
    return () => {
      window.clearTimeout(timer.current);
      timer.current = undefined;
    };
  }, [key, run]);

  useLiveEvents((frame) => {
    if (optionsRef.current.match?.(frame)) schedule();
  });
  useResync(() => schedule());

  const intervalMs = options.intervalMs;
  useEffect(() => {
    if (!intervalMs) return undefined;
    const id = window.setInterval(run, intervalMs);
    return () => window.clearInterval(id);
  }, [intervalMs, run]);

  const mutate = useCallback((update: (current: T) => T) => {
    // Every read in flight makes this change again on its answer. Before the first answer
    // there is nothing to change, and that answer may predate this change (a task submitted
    // while the list loads): read once more when it lands too.
    if (!loaded.current && inFlight.current) again.current = true;
    for (const changes of recorders.current) changes.push(update);
    setData((current) => (current === undefined ? current : update(current)));
  }, []);

  return { data, error, loading, reload: run, mutate };
}

const nowListeners = new Set<() => void>();
let now = Date.now();
window.setInterval(() => {
  now = Date.now();
  for (const listener of nowListeners) listener();
}, 1000);

/** The current time, re-rendering every second (relative times and ages). */
export function useNow(): number {
  return useSyncExternalStore(
    (notify) => {
      nowListeners.add(notify);
      return () => nowListeners.delete(notify);
    },
    () => now,
  );
}
