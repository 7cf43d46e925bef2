// The typed REST client: openapi-fetch over the generated paths, the session's API key on
// every request, problem+json errors turned into ApiError.
import createClient, { type Middleware } from "openapi-fetch";
import type { paths } from "./schema";
import type { Problem } from "./types";

let apiKey: string | null = null;

export function setApiKey(key: string | null): void {
  apiKey = key;
}

export function currentApiKey(): string | null {
  return apiKey;
}

const auth: Middleware = {
  onRequest({ request }) {
    if (apiKey) request.headers.set("X-API-Key", apiKey);
    return request;
  },
};

export const api = createClient<paths>({ baseUrl: window.location.origin });
api.use(auth);

/** An answer that is not 2xx, with the problem details the API (or the proxy) sent. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly problem: Partial<Problem>;

  constructor(status: number, problem: Partial<Problem> | undefined) {
    const detail = problem?.detail ?? problem?.title ?? `the server answered ${status}`;
    super(detail);
    this.status = status;
    this.code = problem?.code ?? `http_${status}`;
    this.problem = problem ?? {};
  }

  /** Field-level messages, one line each, for forms. */
  fieldMessages(): string[] {
    return (this.problem.errors ?? []).map((e) =>
      [e.field ?? e.pointer ?? "", e.message].filter(Boolean).join(": "),
    );
  }
}

type Answer<T> = { data?: T; error?: unknown; response: Response };

/** The body of a 2xx answer; anything else throws ApiError (network failures too). */
export async function unwrap<T>(call: Promise<Answer<T>>): Promise<T> {
  let answer: Answer<T>;
  try {
    answer = await call;
  } catch (e) {
    throw new ApiError(0, {
      code: "network_error",
      detail: `the dashboard could not reach the API (${e instanceof Error ? e.message : String(e)})`,
    });
  }
  if (!answer.response.ok || answer.data === undefined) {
    const problem =
      answer.error && typeof answer.error === "object" ? (answer.error as Partial<Problem>) : undefined;
    throw new ApiError(answer.response.status, problem);
  }
  return answer.data;
}

/** A message a person can act on, for any error an API call threw. */
export function describeError(e: unknown): string {
  if (e instanceof ApiError) {
    const fields = e.fieldMessages();
    const hint =
      e.status === 401
        ? " Sign in again with a valid key."
        : e.status === 403
          ? " Your key lacks the scope this needs."
          : e.status === 429
            ? " Too many requests: wait a moment and try again."
            : e.status === 502 || e.status === 503 || e.status === 0
              ? " Check that the dtq services and Redis are running."
              : "";
    return e.message + (fields.length ? ` (${fields.join("; ")})` : "") + hint;
  }
  return e instanceof Error ? e.message : String(e);
}
