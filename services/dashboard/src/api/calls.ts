// One function per API operation the dashboard uses.
import { api, unwrap } from "./client";
import type {
  Batch,
  GroupPage,
  HistoryRange,
  GroupStats,
  QueueHistory,
  QueueStats,
  Schedule,
  ScheduleRequest,
  Task,
  TaskStatus,
  TaskSummary,
  Worker,
  Workflow,
  WorkflowList,
  WorkflowStatus,
} from "./types";

export type Page<T> = { items: T[]; next_cursor?: string | null };

export async function listQueues(): Promise<QueueStats[]> {
  const page = await unwrap(api.GET("/api/v1/queues"));
  return [...page.items].sort((a, b) => a.name.localeCompare(b.name));
}

export function getHistory(range: HistoryRange, queue: string | null): Promise<QueueHistory> {
  return unwrap(api.GET("/api/v1/stats/history", { params: { query: { range, queue: queue || undefined } } }));
}

export async function listWorkers(): Promise<Worker[]> {
  const page = await unwrap(api.GET("/api/v1/workers"));
  return [...page.items].sort((a, b) => a.id.localeCompare(b.id));
}

export async function listSchedules(): Promise<Schedule[]> {
  const page = await unwrap(api.GET("/api/v1/schedules"));
  return [...page.items].sort((a, b) => a.name.localeCompare(b.name));
}

export function listTasks(filter: {
  queue?: string | null;
  status?: TaskStatus | null;
  task?: string | null;
  cursor?: string | null;
  limit?: number;
}): Promise<Page<TaskSummary>> {
  return unwrap(
    api.GET("/api/v1/tasks", {
      params: {
        query: {
          queue: filter.queue || undefined,
          status: filter.status || undefined,
          task: filter.task || undefined,
          cursor: filter.cursor || undefined,
          limit: filter.limit ?? 25,
        },
      },
    }),
  );
}

export function getTask(id: string): Promise<Task> {
  return unwrap(api.GET("/api/v1/tasks/{task_id}", { params: { path: { task_id: id } } }));
}

export function cancelTask(id: string) {
  return unwrap(api.POST("/api/v1/tasks/{task_id}/cancel", { params: { path: { task_id: id } } }));
}

export function retryTask(id: string) {
  return unwrap(api.POST("/api/v1/tasks/{task_id}/retry", { params: { path: { task_id: id } } }));
}

export function pauseQueue(queue: string) {
  return unwrap(api.POST("/api/v1/queues/{queue}/pause", { params: { path: { queue } } }));
}

export function resumeQueue(queue: string) {
  return unwrap(api.POST("/api/v1/queues/{queue}/resume", { params: { path: { queue } } }));
}

export type QueueLimits = {
  concurrency: number | null;
  rate: string | null;
  burst: number | null;
  max_depth: number | null;
  group_concurrency: number | null;
  group_rate: string | null;
};

export function configureQueue(queue: string, body: QueueLimits) {
  return unwrap(api.PUT("/api/v1/queues/{queue}", { params: { path: { queue } }, body }));
}

export function listGroups(queue: string, cursor: string | null, limit = 50): Promise<GroupPage> {
  return unwrap(
    api.GET("/api/v1/queues/{queue}/groups", {
      params: { path: { queue }, query: { limit, cursor: cursor || undefined } },
    }),
  );
}

export function changeGroup(queue: string, group: string, body: { paused?: boolean; weight?: number }): Promise<GroupStats> {
  return unwrap(api.PUT("/api/v1/queues/{queue}/groups/{group}", { params: { path: { queue, group } }, body }));
}

export function purgeQueue(queue: string) {
  return unwrap(api.DELETE("/api/v1/queues/{queue}/tasks", { params: { path: { queue } } }));
}

export function listDead(
  queue: string,
  filter: { task?: string | null; cursor?: string | null },
): Promise<Page<TaskSummary>> {
  return unwrap(
    api.GET("/api/v1/queues/{queue}/dlq", {
      params: {
        path: { queue },
        query: { limit: 50, task: filter.task || undefined, cursor: filter.cursor || undefined },
      },
    }),
  );
}

export function requeueDead(queue: string, body: { ids?: string[]; all: boolean; task?: string }) {
  return unwrap(api.POST("/api/v1/queues/{queue}/dlq/requeue", { params: { path: { queue } }, body }));
}

export function discardDead(queue: string, id: string) {
  return unwrap(
    api.DELETE("/api/v1/queues/{queue}/dlq/{task_id}", { params: { path: { queue, task_id: id } } }),
  );
}

export function purgeDead(queue: string) {
  return unwrap(api.DELETE("/api/v1/queues/{queue}/dlq", { params: { path: { queue } } }));
}

export function putSchedule(name: string, body: ScheduleRequest) {
  return unwrap(api.PUT("/api/v1/schedules/{name}", { params: { path: { name } }, body }));
}

export function pauseSchedule(name: string) {
  return unwrap(api.POST("/api/v1/schedules/{name}/pause", { params: { path: { name } } }));
}

export function resumeSchedule(name: string) {
  return unwrap(api.POST("/api/v1/schedules/{name}/resume", { params: { path: { name } } }));
}

export function deleteSchedule(name: string) {
  return unwrap(api.DELETE("/api/v1/schedules/{name}", { params: { path: { name } } }));
}

export function listWorkflows(filter: { status?: WorkflowStatus | null; beforeMs?: number | null; limit?: number }): Promise<WorkflowList> {
  return unwrap(
    api.GET("/api/v1/workflows", {
      params: {
        query: {
          status: filter.status || undefined,
          before_ms: filter.beforeMs ?? undefined,
          limit: filter.limit ?? 25,
        },
      },
    }),
  );
}

export function getWorkflow(id: string): Promise<Workflow> {
  return unwrap(api.GET("/api/v1/workflows/{workflow_id}", { params: { path: { workflow_id: id } } }));
}

export function cancelWorkflow(id: string) {
  return unwrap(api.POST("/api/v1/workflows/{workflow_id}/cancel", { params: { path: { workflow_id: id } } }));
}

export function getBatch(id: string): Promise<Batch> {
  return unwrap(api.GET("/api/v1/batches/{batch_id}", { params: { path: { batch_id: id } } }));
}

export function sealBatch(id: string): Promise<Batch> {
  return unwrap(api.POST("/api/v1/batches/{batch_id}/seal", { params: { path: { batch_id: id } } }));
}
