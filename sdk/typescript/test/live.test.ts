// The SDK against a live Capstan stack (e2e/sdk_typescript_test.go starts
// one): CAPSTAN_API, CAPSTAN_TOKEN, CAPSTAN_PROJECT and CAPSTAN_DOMAIN say
// where.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { Capstan, CapstanProblem, type CapstanOptions, type Phase, type RunEvent } from "../src/index.js";

function env(name: string): string {
  const value = process.env[name];
  assert.ok(value, `${name} is not set: this test runs against a live stack (go test -run TestTypeScriptSDK ./e2e)`);
  return value;
}

const options: CapstanOptions = {
  baseUrl: env("CAPSTAN_API"),
  token: env("CAPSTAN_TOKEN"),
  project: env("CAPSTAN_PROJECT"),
  domain: env("CAPSTAN_DOMAIN"),
};
const capstan = new Capstan(options);
const suffix = randomBytes(3).toString("hex");
const timeout = 90_000;

/** collect reads a watch to its end: the events and the phase it returns. */
async function collect(watch: AsyncGenerator<RunEvent, Phase>): Promise<{ events: RunEvent[]; phase: Phase }> {
  const events: RunEvent[] = [];
  for (;;) {
    const next = await watch.next();
    if (next.done) return { events, phase: next.value };
    events.push(next.value);
  }
}

/** until polls cond every 100 ms until it holds, failing after ms. */
async function until(what: string, ms: number, cond: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    assert.ok(Date.now() < deadline, `timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100)); // the polling interval
  }
}

test("create and get the README's minimal run", { timeout }, async () => {
  const run = await capstan.createRun({ name: `sdk-hello-${suffix}`, spec: { steps: [{ name: "hello", command: "echo hello" }] } });
  assert.equal(run.name, `sdk-hello-${suffix}`);
  assert.equal(run.project, options.project);
  const { phase } = await collect(capstan.watchRun(run.name));
  assert.equal(phase, "SUCCEEDED");
  assert.equal((await capstan.getRun(run.name)).phase, "SUCCEEDED");
});

test("listRuns follows next_cursor through every page", { timeout }, async () => {
  const names = new Set<string>();
  for (let i = 0; i < 5; i++) {
    const run = await capstan.createRun({ name: `sdk-list-${suffix}-${i}`, spec: { steps: [{ name: "hello", command: "true" }] } });
    names.add(run.name);
  }
  let pages = 0;
  const counting = new Capstan({ ...options, fetch: (request) => {
    if (new URL(request.url).pathname.endsWith("/runs")) pages++;
    return fetch(request);
  } });
  const listed: string[] = [];
  for await (const run of counting.listRuns({ name_contains: `sdk-list-${suffix}`, limit: 2 })) listed.push(run.name);
  assert.equal(pages, 3, "5 runs, 2 a page: 3 pages");
  assert.equal(listed.length, new Set(listed).size, `no run twice: ${listed.join(" ")}`);
  assert.deepEqual(new Set(listed), names);
});

/**
 * dropAfterFirstEvent is a fetch whose first answer of a run's event stream
 * is cut, as a dropped connection is, right after its first event with an
 * id: the body then errors and the connection is closed. It records the
 * Last-Event-ID of each stream request.
 */
function dropAfterFirstEvent() {
  const lastEventIds: (string | null)[] = [];
  const fetchCutting = async (request: Request): Promise<Response> => {
    const isStream = new URL(request.url).pathname.endsWith("/events");
    if (isStream) lastEventIds.push(request.headers.get("Last-Event-ID"));
    const response = await fetch(request);
    if (!isStream || lastEventIds.length > 1 || !response.body) return response;
    const source = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    const cut = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { value, done } = await source.read();
        if (done) return controller.close();
        seen += value;
        const first = /(^|\n)id: [^\n]*\n(?:[^\n]+\n)*\n/.exec(seen);
        if (!first) return;
        controller.enqueue(new TextEncoder().encode(seen.slice(0, first.index + first[0].length)));
        await source.cancel();
        controller.error(new TypeError("terminated: the test dropped the connection"));
      },
    });
    return new Response(cut, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  return { fetch: fetchCutting, lastEventIds };
}

test("watchRun resumes a dropped stream after the last event, missing and repeating none", { timeout }, async () => {
  const run = await capstan.createRun({ name: `sdk-watch-${suffix}`, spec: { steps: [
    { name: "one", command: "sleep 1" },
    { name: "two", command: "echo two" },
  ] } });
  const dropping = dropAfterFirstEvent();
  const watched = await collect(new Capstan({ ...options, fetch: dropping.fetch }).watchRun(run.name, { reconnectDelayMs: 100 }));
  assert.equal(watched.phase, "SUCCEEDED");

  const ids = watched.events.map((e) => e.id);
  assert.ok(dropping.lastEventIds.length >= 2, "the watch reconnected");
  assert.equal(dropping.lastEventIds[0], null, "the first request starts at the run's first event");
  assert.equal(dropping.lastEventIds[1], String(ids[0]), "the reconnect resumes after the one event received");
  for (let i = 1; i < ids.length; i++) assert.ok(ids[i - 1]! < ids[i]!, `ids strictly increase: ${ids.join(" ")}`);

  // The whole stream of the ended run, read without a cut, holds the same events.
  const full = await collect(capstan.watchRun(run.name));
  assert.equal(full.phase, "SUCCEEDED");
  assert.ok(full.events.length > 1, "a run of two steps has more than one event");
  assert.deepEqual(ids, full.events.map((e) => e.id), "no event missed or repeated across the reconnect");
  assert.deepEqual(watched.events, full.events);
  assert.equal(full.events[0]?.type, "run.created");
});

test("abortRun ends a running run ABORTED", { timeout }, async () => {
  const run = await capstan.createRun({ name: `sdk-abort-${suffix}`, spec: { steps: [{ name: "long", command: "sleep 300" }] } });
  await until("the run RUNNING", 30_000, async () => (await capstan.getRun(run.name)).phase === "RUNNING");
  await capstan.abortRun(run.name, "the SDK test aborts it");
  const { phase } = await collect(capstan.watchRun(run.name));
  assert.equal(phase, "ABORTED");
  assert.equal((await capstan.getRun(run.name)).phase, "ABORTED");
});

test("a bad token is a 401 CapstanProblem", { timeout }, async () => {
  const stranger = new Capstan({ ...options, token: "not-a-token" });
  await assert.rejects(stranger.getRun(`sdk-hello-${suffix}`), (err: unknown) => {
    assert.ok(err instanceof CapstanProblem);
    assert.equal(err.status, 401);
    assert.equal(err.code, "unauthorized");
    return true;
  });
  await assert.rejects(stranger.listRuns().next(), (err: unknown) => err instanceof CapstanProblem && err.status === 401);
});

test("a spec the schema accepts but the server cannot run is a 422 CapstanProblem", { timeout }, async () => {
  await assert.rejects(capstan.createRun({ spec: { steps: [{ name: "a", command: "true" }, { name: "a", command: "true" }] } }),
    (err: unknown) => {
      assert.ok(err instanceof CapstanProblem);
      assert.equal(err.status, 422);
      assert.equal(err.code, "invalid_spec");
      assert.ok(err.errors?.some((e) => e.field === "spec.steps[1].name"), JSON.stringify(err.errors));
      return true;
    });
});

test("watching an unknown run is a 404 CapstanProblem", { timeout }, async () => {
  await assert.rejects(collect(capstan.watchRun(`sdk-none-${suffix}`)),
    (err: unknown) => err instanceof CapstanProblem && err.status === 404 && err.code === "not_found");
});
