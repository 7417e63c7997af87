// Compiled by the SDK's build (tsc --strict), never run: what a caller
// writes type-checks against the types generated from openapi/capstan.yaml,
// and what the API refuses does not.
import { Capstan, CapstanProblem, type CreateRunRequest, type ProblemCode, type RunEvent, type RunSummary } from "../src/index.js";

declare const capstan: Capstan;

// A create needs only what the server requires: a step's name and, for a shell task, its command.
export const minimal: CreateRunRequest = { spec: { steps: [{ name: "hello", command: "echo hello" }] } };
export const http: CreateRunRequest = { spec: { steps: [{ name: "ping", plugin: "http", http: { url: "https://example.com/health" } }] } };
export const template: CreateRunRequest = { workflow: { name: "nightly" }, params: { DAY: "7" } };

export async function calls(signal: AbortSignal): Promise<void> {
  const run = await capstan.createRun(minimal, "hello-1");
  const phase: "SUCCEEDED" | string = run.phase;
  const summaries: RunSummary[] = [];
  for await (const summary of capstan.listRuns({ phase: "FAILED", limit: 10 })) summaries.push(summary);
  const watch = capstan.watchRun(run.name, { signal });
  const first = await watch.next();
  if (first.done) {
    const ended: "SUCCEEDED" | "FAILED" | "ABORTED" | string = first.value;
    void ended;
  } else {
    const event: RunEvent = first.value;
    const id: number = event.id;
    void id;
  }
  await capstan.abortRun(run.name);
  await capstan.abortRun(run.name, "deployed by mistake");
  void phase;
}

export function codes(err: unknown): ProblemCode | undefined {
  if (!(err instanceof CapstanProblem)) return undefined;
  const status: number = err.status;
  void status;
  // @ts-expect-error: a code the spec's enum does not hold
  const wrong: ProblemCode = "no_such_code";
  void wrong;
  return err.code;
}

export function refused(): void {
  // @ts-expect-error: a phase the spec's enum does not hold
  void capstan.listRuns({ phase: "DONE" });
  // @ts-expect-error: the iterator sets the cursor itself
  void capstan.listRuns({ cursor: "abc" });
}

// @ts-expect-error: a step needs a name
export const nameless: CreateRunRequest = { spec: { steps: [{ command: "echo hello" }] } };
// @ts-expect-error: an unknown field of a create
export const unknown: CreateRunRequest = { spec: { steps: [{ name: "a", command: "true" }] }, retries: 3 };
