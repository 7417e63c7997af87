// Compiled by make lint against the types openapi-typescript generates from
// capstan.yaml: what a client sends on a create needs only what the server
// requires (a step's name and, for a shell task, its command).
import type { components } from "./capstan";

type S = components["schemas"];

export const step: S["StepRequest"] = { name: "hello", command: "echo hello" };
export const run: S["CreateRunRequest"] = { spec: { steps: [{ name: "hello", command: "echo hello" }] } };
export const batch: S["CreateRunsRequest"] = { runs: [{ spec: { steps: [{ name: "hello", command: "echo hello" }] } }] };
export const template: S["PushWorkflowRequest"] = { name: "hello", spec: { steps: [{ name: "hello", command: "echo hello" }] } };
export const http: S["StepRequest"] = { name: "ping", plugin: "http", http: { url: "https://example.com/health" } };
export const spec: S["WorkflowSpecRequest"] = {
  params: [{ name: "WHO" }],
  concurrency: { key: "params.WHO", max_runs: 1 },
  steps: [{ name: "hello", command: "echo $WHO", cache: { version: "1" }, rate_limits: [{ name: "paid-api" }] }],
};

// What the server refuses does not compile: a kind, plugin, priority or
// problem code outside its enum.
// @ts-expect-error: "tsak" is no step kind
export const typo: S["StepRequest"] = { name: "typo", kind: "tsak", command: "true" };
// @ts-expect-error: "ssh" is no plugin
export const plugin: S["StepRequest"] = { name: "remote", plugin: "ssh", command: "true" };
// @ts-expect-error: "urgent" is no priority band
export const band: S["StepRequest"] = { name: "now", priority: "urgent", command: "true" };
// @ts-expect-error: a code the spec's enum does not hold
export const code: S["Problem"]["code"] = "no_such_code";
