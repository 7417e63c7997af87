// @capstan/sdk: a TypeScript client of Capstan's public REST API.
export {
  Capstan, CapstanProblem, isTerminal,
  type Action, type CapstanOptions, type CreateRunRequest, type FieldError, type ListRunsQuery, type Phase,
  type Problem, type ProblemCode, type Run, type RunEvent, type RunSummary, type WatchOptions,
} from "./client.js";
export { parseEvents, type ServerSentEvent } from "./sse.js";
export type { components, operations, paths } from "./schema.js";
