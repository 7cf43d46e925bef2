// React side of the live connection: one provider (with the shared query cache), hooks for
// state, events and data that is re-read when an event says it changed.
import {
  hashKey,
  keepPreviousData,
  QueryClientProvider,
  type QueryKey,
  useQuery,
  useQueryClient,
} from "@tanstack/react-query";
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
import { newQueryClient } from "../api/query";
import { type ConnectionState, type EventFrame, LiveConnection } from "./connection";
import { LOOK_BACK_S, LiveStats, type Snapshot } from "./stats";

type Live = { connection: LiveConnection; stats: LiveStats };

const LiveContext = createContext<Live | null>(null);

/** The live connection, the figures drawn from it and the query cache, for one API key
 * (mount it again for another key: nothing read with the old one is shown). */
export function LiveProvider({ apiKey, children }: { apiKey: string | null; children: ReactNode }) {
  const [live] = useState<Live>(() => ({ connection: new LiveConnection(), stats: new LiveStats() }));
  const [queries] = useState(newQueryClient);
  useEffect(() => {
    const { connection, stats } = live;
    const off = connection.onEvent((frame) => stats.add(frame));
    // The event feed opens on the last minutes: the first subscription replays them.
    connection.start(apiKey, LOOK_BACK_S);
    const clock = window.setInterval(() => stats.tick(), 5000);
    return () => {
      off();
      window.clearInterval(clock);
      connection.stop();
    };
  }, [live, apiKey]);
  return (
    <QueryClientProvider client={queries}>
      <LiveContext.Provider value={live}>{children}</LiveContext.Provider>
    </QueryClientProvider>
  );
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

/** The live figures themselves, to ask what the events counted (read with useLiveStats, whose
 * version changes with every event, so a component re-renders when they do). */
export function useLiveStatsSource(): LiveStats {
  return useLive().stats;
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
  /** No answer yet for this key (and none of an earlier key shown meanwhile). */
  loading: boolean;
  /** `data` is the answer of the previous key (a filter or page changed), shown while this
   * key's read is on its way: act on none of it. */
  stale: boolean;
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
  /** While a new key (another filter or page) loads, show the previous key's answer. */
  keepPrevious?: boolean;
};

type Change = (current: unknown) => unknown;

/** The live changes made while a read of a key was on its way, one list per read, by the key's
 * hash: the read makes them again on its answer, or the answer would undo them (a row added by
 * an event vanished when a read that had left before the event answered after it). Shared by
 * every component that reads the key, as the cache is. */
const changesInFlight = new Map<string, Set<Change[]>>();
/** Keys asked to read again while a read was on its way: read once more when it lands. */
const readAgain = new Set<string>();

function changesOf(hash: string): Set<Change[]> {
  let open = changesInFlight.get(hash);
  if (!open) {
    open = new Set();
    changesInFlight.set(hash, open);
  }
  return open;
}

/**
 * Data loaded from the API through the shared query cache (TanStack Query), read again when
 * the live events say it changed. `key` names the request (api/query.ts `keys`): a new key
 * loads afresh, or starts from what the cache holds for it.
 */
export function useResource<T>(
  key: QueryKey,
  load: () => Promise<T>,
  options: ResourceOptions = {},
): Resource<T> {
  const client = useQueryClient();
  const hash = hashKey(key);
  const keyRef = useRef(key);
  keyRef.current = key;
  const loadRef = useRef(load);
  loadRef.current = load;
  const optionsRef = useRef(options);
  optionsRef.current = options;
  const timer = useRef<number | undefined>(undefined);

  const refetch = useCallback(() => {
    void client.refetchQueries({ queryKey: keyRef.current, exact: true }, { cancelRefetch: false });
  }, [client]);

  const query = useQuery<T>({
    queryKey: key,
    queryFn: async () => {
      const changes: Change[] = [];
      const open = changesOf(hash);
      open.add(changes);
      try {
        const value = await loadRef.current();
        return changes.reduce<unknown>((current, change) => change(current), value) as T;
      } finally {
        open.delete(changes);
        if (readAgain.delete(hash)) window.setTimeout(refetch, 0);
      }
    },
    refetchInterval: options.intervalMs ?? false,
    placeholderData: options.keepPrevious ? keepPreviousData : undefined,
  });

  const reload = useCallback(() => {
    if (client.getQueryState(keyRef.current)?.fetchStatus === "fetching") readAgain.add(hash);
    else refetch();
  }, [client, hash, refetch]);

  useEffect(
    () => () => {
      window.clearTimeout(timer.current);
      timer.current = undefined;
    },
    [hash],
  );

  const schedule = useCallback(() => {
    if (timer.current !== undefined) return;
    timer.current = window.setTimeout(() => {
      timer.current = undefined;
      reload();
    }, optionsRef.current.debounceMs ?? 500);
  }, [reload]);

  useLiveEvents((frame) => {
    if (optionsRef.current.match?.(frame)) schedule();
  });
  useResync(() => schedule());

  const mutate = useCallback(
    (update: (current: T) => T) => {
      // Every read in flight makes this change again on its answer. Before the first answer
      // there is nothing to change, and that answer may predate this change (a task submitted
      // while the list loads): read once more when it lands too.
      for (const changes of changesOf(hash)) changes.push(update as Change);
      const state = client.getQueryState(keyRef.current);
      if (state?.data === undefined && state?.fetchStatus === "fetching") readAgain.add(hash);
      client.setQueryData<T>(keyRef.current, (current) => (current === undefined ? current : update(current)));
    },
    [client, hash],
  );

  return {
    data: query.data,
    error: query.error ?? undefined,
    loading: query.isPending,
    stale: query.isPlaceholderData,
    reload,
    mutate,
  };
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
