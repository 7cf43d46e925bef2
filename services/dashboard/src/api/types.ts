// Names for the API's shapes, all generated from docs/openapi.json (src/api/schema.d.ts).
import type { components } from "./schema";

type Schemas = components["schemas"];

export type Task = Schemas["TaskRecord"];
/** A task as the lists return it: no arguments, result or error history (GET /tasks/{id} has them). */
export type TaskSummary = Schemas["TaskSummary"];
export type TaskStatus = Schemas["TaskStatus"];
export type TaskError = Schemas["TaskError"];
export type QueueStats = Schemas["QueueStats"];
export type GroupStats = Schemas["GroupStats"];
export type GroupPage = Schemas["GroupPage"];
export type Worker = Schemas["WorkerInfo"];
export type Schedule = Schemas["ScheduleInfo"];
export type LastTick = Schemas["LastTick"];
export type ScheduleRequest = Schemas["ScheduleRequest"];
export type Workflow = Schemas["WorkflowRecord"];
export type WorkflowSummary = Schemas["WorkflowSummary"];
export type WorkflowList = Schemas["WorkflowList"];
export type WorkflowStatus = Schemas["WorkflowStatus"];
export type WorkflowStep = Schemas["WorkflowStep"];
/** A batch's live counts and its callbacks' states (GET /batches/{id}); the same id is a workflow of kind "batch". */
export type Batch = Schemas["BatchRecord"];
export type Problem = Schemas["Problem"];
/** Per-minute figures of one queue or every queue (GET /stats/history). */
export type QueueHistory = Schemas["QueueHistory"];
export type HistoryRange = Schemas["HistoryRange"];

export const HISTORY_RANGES: readonly HistoryRange[] = ["1h", "6h", "24h"];
export type Identity = Schemas["Identity"];

export const TASK_STATUSES: readonly TaskStatus[] = [
  "scheduled",
  "queued",
  "running",
  "retrying",
  "succeeded",
  "dead",
  "failed",
  "cancelled",
  "expired",
];

export const WORKFLOW_STATUSES: readonly WorkflowStatus[] = ["running", "succeeded", "failed", "cancelled"];

export const CANCELLABLE: ReadonlySet<TaskStatus> = new Set([
  "scheduled",
  "queued",
  "retrying",
  "running",
]);
export const RETRYABLE: ReadonlySet<TaskStatus> = new Set(["dead", "failed"]);
export const TERMINAL: ReadonlySet<TaskStatus> = new Set([
  "succeeded",
  "dead",
  "failed",
  "cancelled",
  "expired",
]);
