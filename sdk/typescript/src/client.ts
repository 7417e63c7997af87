// The Capstan client: typed calls over openapi-fetch, cursor pages and a
// run's event stream as async iterators, problems as CapstanProblem.
import createClient, { type Client } from "openapi-fetch";
import type { components, operations, paths } from "./schema.js";
import { parseEvents } from "./sse.js";

type Schemas = components["schemas"];
/** A run with its spec and actions (GET .../runs/{run}). */
export type Run = Schemas["Run"];
/** A run as a list page shows it. */
export type RunSummary = Schemas["RunSummary"];
/** The body of a create: an inline `spec` or a `workflow` template. */
export type CreateRunRequest = Schemas["CreateRunRequest"];
/** The phase of a run or an action. */
export type Phase = Schemas["Phase"];
/** One run_events row, the data of one event of a run's stream. */
export type RunEvent = Schemas["RunEvent"];
/** The action an abort answers with. */
export type Action = Schemas["Action"];
/** An RFC 9457 problem, as the API answers every error. */
export type Problem = Schemas["Problem"];
/** The stable machine-readable code of a problem. */
export type ProblemCode = Problem["code"];
/** A field a problem names, a JSON path into the request body. */
export type FieldError = Schemas["FieldError"];
/** The filters of listRuns; the iterator sets the cursor itself. */
export type ListRunsQuery = Omit<NonNullable<operations["ListRuns"]["parameters"]["query"]>, "cursor">;

/** How a Capstan client reaches the API. */
export interface CapstanOptions {
  /** The API's base URL, e.g. http://127.0.0.1:8080. */
  baseUrl: string;
  /** The bearer token: an API token or CAPSTAN_ADMIN_TOKEN. */
  token: string;
  /** The project and domain every call is scoped to. */
  project: string;
  domain: string;
  /** The fetch the client sends each request with; default globalThis.fetch. */
  fetch?: (request: Request) => Promise<Response>;
}

/** Options of watchRun. */
export interface WatchOptions {
  /** Ends the watch (the iterator throws the signal's reason). */
  signal?: AbortSignal;
  /** Resume after this event id instead of from the run's first event. */
  lastEventId?: number;
  /** Milliseconds before a reconnect; default 1000, or the server's `retry:`. */
  reconnectDelayMs?: number;
  /** Failed connections in a row (no event between) before the watch throws; default 10. */
  maxReconnects?: number;
}

// Every code of the spec's Problem.code enum, as the keys of a record of
// all of them: tsc fails the build when the enum gains or loses a code
// this list does not.
const everyProblemCode: Record<ProblemCode, true> = {
  bad_request: true, invalid_spec: true, invalid_request: true, not_found: true, conflict: true, already_terminal: true,
  internal: true, unavailable: true, unsupported_media_type: true, method_not_allowed: true, request_too_large: true,
  unauthorized: true, forbidden: true, rate_limited: true, not_waiting_for_approval: true, not_restartable: true,
  not_terminal: true, abort_pending: true, archive_unavailable: true,
};
const problemCodes: ReadonlySet<string> = new Set(Object.keys(everyProblemCode));

/**
 * CapstanProblem is a non-2xx answer of the API: its problem+json fields.
 * A body that is no problem (a proxy's page) gives a problem of the
 * response's status with code "internal" and the body as detail.
 */
export class CapstanProblem extends Error implements Problem {
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly code: ProblemCode;
  readonly detail?: string;
  readonly instance?: string;
  readonly errors?: FieldError[];

  constructor(problem: Problem) {
    super(`${problem.status} ${problem.code}: ${problem.detail ?? problem.title}`);
    this.name = "CapstanProblem";
    this.type = problem.type;
    this.title = problem.title;
    this.status = problem.status;
    this.code = problem.code;
    if (problem.detail !== undefined) this.detail = problem.detail;
    if (problem.instance !== undefined) this.instance = problem.instance;
    if (problem.errors !== undefined) this.errors = problem.errors;
  }

  /**
   * from reads the problem of a non-2xx response from its parsed body. A
   * code this SDK does not know (a newer server's) reads as "internal".
   */
  static from(response: Response, body: unknown): CapstanProblem {
    const p = typeof body === "object" && body !== null ? body as Record<string, unknown> : {};
    const text = (v: unknown) => typeof v === "string" ? v : undefined;
    const detail = text(p.detail) ?? (typeof body === "string" && body !== "" ? body : undefined);
    const instance = text(p.instance);
    return new CapstanProblem({
      type: text(p.type) ?? "about:blank",
      title: text(p.title) ?? (response.statusText || `HTTP ${response.status}`),
      status: typeof p.status === "number" ? p.status : response.status,
      code: typeof p.code === "string" && problemCodes.has(p.code) ? p.code as ProblemCode : "internal",
      ...(detail !== undefined && { detail }),
      ...(instance !== undefined && { instance }),
      ...(Array.isArray(p.errors) && { errors: p.errors as FieldError[] }),
    });
  }
}

/** ok returns a call's data, or throws its CapstanProblem. */
function ok<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (!result.response.ok || result.data === undefined) throw CapstanProblem.from(result.response, result.error);
  return result.data;
}

const terminalPhases: ReadonlySet<Phase> = new Set<Phase>(["SUCCEEDED", "FAILED", "ABORTED", "TIMED_OUT", "UNSCHEDULABLE", "WORKER_FAILED", "SKIPPED"]);

/** isTerminal reports whether a run in phase has ended. */
export function isTerminal(phase: Phase): boolean { return terminalPhases.has(phase); }

/** Capstan is a client of one project/domain of a Capstan API. */
export class Capstan {
  /** The openapi-fetch client, for the operations this class does not wrap. */
  readonly api: Client<paths>;
  readonly #scope: { project: string; domain: string };

  constructor(options: CapstanOptions) {
    this.api = createClient<paths>({ baseUrl: options.baseUrl, headers: { Authorization: `Bearer ${options.token}` },
      ...(options.fetch !== undefined && { fetch: options.fetch }) });
    this.#scope = { project: options.project, domain: options.domain };
  }

  /** createRun creates a run; idempotencyKey makes a retried create return the first run. */
  async createRun(body: CreateRunRequest, idempotencyKey?: string): Promise<Run> {
    return ok(await this.api.POST("/v1/projects/{project}/domains/{domain}/runs", {
      params: { path: this.#scope, ...(idempotencyKey !== undefined && { header: { "Idempotency-Key": idempotencyKey } }) },
      body,
    }));
  }

  /** getRun reads a run with its actions. */
  async getRun(name: string): Promise<Run> {
    return ok(await this.api.GET("/v1/projects/{project}/domains/{domain}/runs/{run}", {
      params: { path: { ...this.#scope, run: name } },
    }));
  }

  /** listRuns yields the runs matching query, newest first, fetching page after page by next_cursor. */
  async *listRuns(query: ListRunsQuery = {}): AsyncGenerator<RunSummary, void, undefined> {
    let cursor: string | undefined;
    do {
      const page = ok(await this.api.GET("/v1/projects/{project}/domains/{domain}/runs", {
        params: { path: this.#scope, query: { ...query, ...(cursor !== undefined && { cursor }) } },
      }));
      yield* page.runs;
      cursor = page.next_cursor;
    } while (cursor !== undefined);
  }

  /** abortRun aborts a run; the answer is the recorded abort, delivered to the executors asynchronously. */
  async abortRun(name: string, reason?: string): Promise<Action> {
    return ok(await this.api.POST("/v1/projects/{project}/domains/{domain}/runs/{run}/abort", {
      params: { path: { ...this.#scope, run: name } },
      body: reason !== undefined ? { reason } : {},
    }));
  }

  /**
   * watchRun yields the run's events in id order, its stored ones first,
   * then live ones, and returns the run's terminal phase once the server
   * sends `end`. A dropped or closed connection is reopened with
   * Last-Event-ID of the last event yielded, so none is missed or repeated.
   * A 4xx answer other than 429 throws its CapstanProblem; more than
   * maxReconnects failed connections in a row throw the last failure.
   */
  async *watchRun(name: string, options: WatchOptions = {}): AsyncGenerator<RunEvent, Phase, undefined> {
    const { signal } = options;
    let lastId = options.lastEventId;
    let delay = options.reconnectDelayMs ?? 1000;
    let failures = 0;
    for (;;) {
      signal?.throwIfAborted();
      let failure: unknown;
      try {
        const result = await this.api.GET("/v1/projects/{project}/domains/{domain}/runs/{run}/events", {
          params: { path: { ...this.#scope, run: name }, ...(lastId !== undefined && { header: { "Last-Event-ID": String(lastId) } }) },
          parseAs: "stream",
          ...(signal !== undefined && { signal }),
        });
        if (!result.response.ok || !result.data) {
          const problem = CapstanProblem.from(result.response, result.error);
          if (problem.status < 500 && problem.status !== 429) throw problem;
          failure = problem;
        } else {
          for await (const sse of parseEvents(result.data)) {
            if (sse.retry !== undefined) delay = sse.retry;
            if (sse.event === "end") return (JSON.parse(sse.data) as { phase: Phase }).phase;
            if (sse.id === undefined) continue;
            const event = JSON.parse(sse.data) as RunEvent;
            lastId = event.id;
            failures = 0;
            yield event;
          }
          failure = new Error(`the event stream of run ${name} closed before its end`);
        }
      } catch (err) {
        if (err instanceof CapstanProblem || signal?.aborted) throw err;
        failure = err;
      }
      if (++failures > (options.maxReconnects ?? 10)) throw failure;
      await sleep(delay, signal);
    }
  }
}

/** sleep resolves after ms, or rejects with the signal's reason once it aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { signal?.removeEventListener("abort", onAbort); resolve(); }, ms);
    const onAbort = () => { clearTimeout(timer); reject(signal?.reason); };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
