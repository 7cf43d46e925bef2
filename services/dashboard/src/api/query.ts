// The one data cache of the dashboard (TanStack Query): every view reads through it, so two
// views asking for the queues share one answer, and a view that comes back shows what it had
// while it reads again. Query keys name the API operation and its parameters.
import { QueryClient } from "@tanstack/react-query";
import { ApiError } from "./client";
import type { HistoryRange, TaskStatus, WorkflowStatus } from "./types";

/** Answers younger than this are not read again when another view mounts them. */
const FRESH_MS = 1000;
const RETRIES = 2;

/** A 4xx will answer the same again: only network errors, 5xx and 429 are retried. */
export function shouldRetry(failures: number, error: unknown): boolean {
  if (failures >= RETRIES) return false;
  if (!(error instanceof ApiError)) return true;
  return error.status === 0 || error.status === 429 || error.status >= 500;
}

export function newQueryClient(): QueryClient {
  return new QueryClient({
    defaultOptions: {
      queries: {
        staleTime: FRESH_MS,
        retry: shouldRetry,
        // Live events say when data changed; a window regaining focus does not.
        refetchOnWindowFocus: false,
      },
    },
  });
}

export const keys = {
  queues: () => ["queues"] as const,
  workers: () => ["workers"] as const,
  schedules: () => ["schedules"] as const,
  history: (range: HistoryRange, queue: string | null) => ["history", range, queue] as const,
  tasks: (filter: { queue: string | null; status: TaskStatus | null; task: string | null; cursor: string | null }) =>
    ["tasks", filter] as const,
  task: (id: string) => ["task", id] as const,
  groups: (queue: string, cursor: string | null) => ["groups", queue, cursor] as const,
  dead: (queue: string | null, task: string | null, cursor: string | null) => ["dead", queue, task, cursor] as const,
  workflows: (status: WorkflowStatus | null, cursor: string | null) => ["workflows", status, cursor] as const,
  workflow: (id: string) => ["workflow", id] as const,
  batch: (id: string) => ["batch", id] as const,
};
