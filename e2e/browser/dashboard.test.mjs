// The dashboard's browser test: headless Chromium driven by playwright-core
// against a real Capstan stack (started by e2e/browser_test.go). It opens the
// runs list; watches a running DAG run's node change phase without a reload;
// aborts a run through the confirmation; approves an approval step with a
// comment; checks a retried task's two attempts in their Iris colours by
// computed style; follows a live log; renders a run of 2 × 1,000 tasks
// within a bound, one node a step with its counts, and pages its tasks; shows a template run's origin and the
// template's versions and params; and shows a schedule's next times, pauses
// and unpauses it and triggers a run of it. And the dashboard's own
// contracts: a link copied from a filtered page opens the same project,
// run, tab and filters in a fresh browser context (whatever that browser
// remembers); a focused run link keeps the focus across 5 s of live
// updates; the graph opens a step by keyboard alone; dark mode (the
// system's and the toggle); a finished DAG run's event history lists
// every event of its stream in order; the new-run form refuses what the
// spec's JSON Schema refuses before sending, and starts runs of a YAML
// spec and of a template that succeed; and axe-core finds no serious or
// critical violation on the runs, run, action, workers and aborts pages.
// Every wait is on a condition with a timeout. Screenshots go to
// $CAPSTAN_SCREENSHOTS.
//
// Environment: CAPSTAN_API (base URL), CAPSTAN_TOKEN (optional bearer token),
// CAPSTAN_DATA_DIR (the stack's data dir: run directories hold the files
// steps wait for), CAPSTAN_PROJECT, CAPSTAN_DOMAIN, CAPSTAN_SCREENSHOTS,
// CHROMIUM (default /usr/bin/chromium).

import {chromium} from 'playwright-core';
import assert from 'node:assert/strict';
import {mkdirSync, writeFileSync} from 'node:fs';
import {createRequire} from 'node:module';
import {join} from 'node:path';

// AXE is axe-core's browser script, injected into the page under test.
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

const api = process.env.CAPSTAN_API;
const token = process.env.CAPSTAN_TOKEN || '';
const dataDir = process.env.CAPSTAN_DATA_DIR;
const project = process.env.CAPSTAN_PROJECT || 'e2e';
const domain = process.env.CAPSTAN_DOMAIN || 'test';
const shots = process.env.CAPSTAN_SCREENSHOTS || '.data/browser';
const T = 30_000; // the timeout of every wait, ms

// Iris's dashboard colours, as computed styles.
const IRIS = {FAILED: 'rgb(207, 34, 46)', SUCCEEDED: 'rgb(26, 127, 55)'};

const scope = `${api}/v1/projects/${project}/domains/${domain}`;
const runs = `${scope}/runs`;
const authz = token ? {Authorization: `Bearer ${token}`} : {};

// post sends body to the scope's path and checks the answer's status.
async function post(path, body, status) {
  const r = await fetch(scope + path, {method: 'POST', headers: {'Content-Type': 'application/json', ...authz}, body: JSON.stringify(body)});
  const text = await r.text();
  assert.equal(r.status, status, `POST ${path}: ${r.status} ${text}`);
  return JSON.parse(text);
}

const createRun = (name, spec) => post('/runs', {name, spec}, 201);

// background is the computed background colour of the element loc names.
// The pages re-render on every event, so an element read just as it is
// replaced is detached and has no style: read again until it has one.
async function background(loc) {
  const deadline = Date.now() + T;
  for (;;) {
    const bg = await loc.evaluate((el) => el.isConnected ? getComputedStyle(el).backgroundColor : '');
    if (bg !== '') return bg;
    assert.ok(Date.now() < deadline, 'the element never stayed attached');
    await new Promise((done) => setTimeout(done, 50));
  }
}

// abortDelivered waits until no action of run has an abort still being
// delivered: the API refuses a restart (409) until then.
async function abortDelivered(name) {
  const deadline = Date.now() + T;
  for (;;) {
    const r = await fetch(`${runs}/${name}`, {headers: authz});
    const run = await r.json();
    if (r.ok && run.actions.every((a) => !a.abort || !a.abort.requested_at)) return;
    assert.ok(Date.now() < deadline, `the abort of ${name} was never delivered`);
    await new Promise((done) => setTimeout(done, 100));
  }
}

// touch creates file in run's directory, which the steps of run wait for.
function touch(run, file) {
  const dir = join(dataDir, 'runs', project, domain, run);
  mkdirSync(dir, {recursive: true});
  writeFileSync(join(dir, file), '');
}

const waitFile = (f) => `while [ ! -e "$CAPSTAN_RUN_DIR/${f}" ]; do sleep 0.1; done`;

async function shot(page, name) {
  mkdirSync(shots, {recursive: true});
  await page.screenshot({path: join(shots, name + '.png'), fullPage: true});
}

async function step(name, fn) {
  const t0 = Date.now();
  await fn();
  console.log(`ok   ${name} (${Date.now() - t0} ms)`);
}

// login answers the token prompt of a page just opened (the stack
// requires a token; a fresh browser context has none).
async function login(page) {
  if (!token) return;
  await page.locator('#token').waitFor({state: 'visible'});
  await page.fill('#token-input', token);
  await page.click('#token button');
}

// runEvents reads run's whole event stream (a terminal run's ends with
// `end`) and returns its events' ids and types, in the stream's order.
async function runEvents(name) {
  const r = await fetch(`${runs}/${name}/events`, {headers: {...authz, Accept: 'text/event-stream'}});
  assert.equal(r.status, 200);
  const out = [];
  for (const block of (await r.text()).split('\n\n')) {
    const ev = {};
    for (const line of block.split('\n')) {
      const c = line.indexOf(':');
      if (c > 0) ev[line.slice(0, c)] = line.slice(c + 1).trim();
    }
    if (ev.id && ev.event !== 'end') out.push({id: ev.id, type: ev.event, step: JSON.parse(ev.data).action || ''});
  }
  return out;
}

// succeeded waits until run's phase is SUCCEEDED through the API.
async function succeeded(name) {
  const deadline = Date.now() + T;
  for (;;) {
    const r = await fetch(`${runs}/${name}`, {headers: authz});
    const run = await r.json();
    if (run.phase === 'SUCCEEDED') return;
    assert.ok(!run.ended_at, `${name} ended ${run.phase}`);
    assert.ok(Date.now() < deadline, `${name} is still ${run.phase}`);
    await new Promise((done) => setTimeout(done, 100));
  }
}

async function main() {
  await createRun('live-dag', {mode: 'DAG', steps: [
    {name: 'first', command: `${waitFile('go')}; echo first done`},
    {name: 'second', depends_on: ['first'], command: 'echo second'},
    {name: 'side', command: 'echo side'},
  ]});
  await createRun('to-abort', {steps: [{name: 'long', command: 'sleep 300'}]});
  await createRun('needs-approval', {steps: [{name: 'gate', kind: 'approval'}, {name: 'after', command: 'echo approved'}]});
  await createRun('retried', {steps: [{name: 'flaky', max_retries_failure: 1,
    command: 'f="$CAPSTAN_RUN_DIR/once"; if [ ! -e "$f" ]; then touch "$f"; echo first try fails >&2; exit 1; fi; echo ok'}]});
  await createRun('no-gpu', {steps: [{name: 'gpu', command: 'true', constraints: [{key: 'gpu', op: 'EXISTS'}]}]});
  // wide's 2,000 tasks sit in the batch band, so the interactive tasks of
  // the other runs (and of a restart) are placed ahead of them.
  await createRun('wide', {steps: [{name: 'w1', plugin: 'noop', replicas: 1000, priority: 'batch'},
    {name: 'w2', plugin: 'noop', replicas: 1000, priority: 'batch'}]});
  await createRun('talker', {steps: [{name: 'talk',
    command: `for i in 1 2 3; do echo "line $i"; done; ${waitFile('stop')}; echo "last line"`}]});

  const browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox']});
  const page = await browser.newPage({viewport: {width: 1400, height: 900}});
  page.setDefaultTimeout(T);
  page.on('pageerror', (e) => console.error('page error:', e.message));
  page.on('dialog', (d) => { throw new Error('unexpected native dialog: ' + d.message()); });
  try {
    await scenario(page, browser);
  } catch (e) {
    await shot(page, 'failure').catch(() => {});
    throw e;
  } finally {
    await browser.close();
  }
}

async function scenario(page, browser) {
  await step('runs list', async () => {
    await page.goto(`${api}/ui/?project=${project}&domain=${domain}#/runs`);
    await login(page);
    for (const r of ['live-dag', 'to-abort', 'needs-approval', 'retried', 'no-gpu', 'talker']) {
      await page.locator(`tr[data-run="${r}"] .badge`).waitFor();
    }
    await shot(page, '1-runs');
    await page.fill('#runs-search', 'abort');
    await page.locator('tr[data-run="live-dag"]').waitFor({state: 'detached'});
    assert.equal(await page.locator('tbody#runs tr').count(), 1);
    await page.selectOption('#runs-phase', 'SUCCEEDED');
    await page.locator('tr[data-run="to-abort"]').waitFor({state: 'detached'});
    await page.selectOption('#runs-phase', '');
    await page.locator('tr[data-run="to-abort"]').waitFor();
    // A refused request shows the problem's detail.
    await page.fill('#runs-search', 'a_b');
    await page.locator('#msg', {hasText: 'name_contains'}).waitFor();
    console.log('     refusal shown: ' + await page.textContent('#msg'));
    await page.fill('#runs-search', '');
    await page.locator('#msg').waitFor({state: 'hidden'});
  });

  await step('a DAG node changes phase without reload', async () => {
    await page.click('tr[data-run="live-dag"] a');
    await page.locator('g.node[data-step="first"][data-phase="RUNNING"]').waitFor();
    await page.evaluate(() => { window.notReloaded = true; });
    await shot(page, '2-dag-running');
    touch('live-dag', 'go');
    await page.locator('g.node[data-step="first"][data-phase="SUCCEEDED"]').waitFor();
    await page.locator('g.node[data-step="second"][data-phase="SUCCEEDED"]').waitFor();
    await page.locator('#run-phase [data-state="SUCCEEDED"]').waitFor();
    assert.equal(await page.evaluate(() => window.notReloaded), true, 'the page reloaded');
    assert.equal(await page.locator('g.node rect.status-succeeded').count(), 3);
    await shot(page, '3-dag-succeeded');
  });

  await step("a finished DAG run's event history lists every event in order, filtered by type and step", () => eventHistory(page));
  await step('the graph opens a step by keyboard alone', () => graphByKeyboard(page));
  await step('a focused run link keeps the focus across 5 s of live updates', () => keepsFocus(page));
  await step('a copied link opens the same project, run and filters in a fresh browser context', () => deepLinks(page, browser));
  await step('dark mode: the system scheme, the toggle, remembered', () => darkMode(page));

  await step('abort a run through the confirmation', async () => {
    await page.evaluate(() => { location.hash = '#/runs/to-abort'; });
    await page.locator('tr[data-step="long"] .step-phase [data-state="RUNNING"]').waitFor();
    await page.click('#run-controls button[data-op="abort"]');
    await page.locator('#confirm').waitFor({state: 'visible'});
    await shot(page, '4-abort-confirm');
    await page.click('#confirm-ok');
    await page.locator('#run-phase [data-state="ABORTED"]').waitFor();
    await page.locator('g.node[data-step="long"][data-phase="ABORTED"]').waitFor();
    await shot(page, '5-aborted');
    // Restart it from its step, once its abort is delivered: the ended
    // run's page follows it again.
    await abortDelivered('to-abort');
    await page.click('#run-controls button[data-op="restart"]');
    await page.selectOption('#confirm-step', 'long');
    await page.click('#confirm-ok');
    await page.locator('tr[data-step="long"] .step-phase [data-state="RUNNING"]').waitFor();
    await page.locator('#run-phase [data-state="RUNNING"]').waitFor();
  });

  await step('approve an approval step with a comment', async () => {
    await page.evaluate(() => { location.hash = '#/runs/needs-approval'; });
    await page.click('button[data-op="approve"][data-step="gate"]');
    await page.locator('#confirm').waitFor({state: 'visible'});
    await page.fill('#confirm-comment', 'ship it');
    await page.click('#confirm-ok');
    await page.locator('tr[data-step="gate"] .approval', {hasText: 'ship it'}).waitFor();
    await page.locator('#run-phase [data-state="SUCCEEDED"]').waitFor();
    await shot(page, '6-approved');
  });

  await step('delete an ended run through the confirmation', async () => {
    await page.click('#run-controls button[data-op="delete"]');
    await page.locator('#confirm').waitFor({state: 'visible'});
    await page.click('#confirm-ok');
    await page.waitForURL(/#\/runs$/);
    const r = await fetch(`${runs}/needs-approval`, {headers: authz});
    assert.equal(r.status, 404, 'the run is gone');
    // Pages shown before this one must not have heard the click.
    for (const kept of ['live-dag', 'to-abort']) {
      const k = await fetch(`${runs}/${kept}`, {headers: authz});
      assert.equal(k.status, 200, `run ${kept} is kept`);
    }
    await page.locator('tr[data-run="needs-approval"]').waitFor({state: 'detached'});
  });

  await step('a retried task shows two attempts in Iris colours', async () => {
    await page.evaluate(() => { location.hash = '#/runs/retried/actions/flaky'; });
    await page.locator('tr.attempt[data-attempt="2"][data-state="SUCCEEDED"]').waitFor();
    const rows = page.locator('tr.attempt');
    assert.equal(await rows.count(), 2);
    for (const [n, state] of [[1, 'FAILED'], [2, 'SUCCEEDED']]) {
      const b = page.locator(`tr.attempt[data-attempt="${n}"] .badge`);
      assert.equal(await b.getAttribute('data-state'), state);
      const bg = await background(b);
      assert.equal(bg, IRIS[state], `attempt ${n} ${state} colour`);
    }
    await shot(page, '7-attempts');
  });

  await step('every Iris task state in its colour; "(worker failure)" on worker failures', () => irisColours(page));

  await step("a PENDING task shows its pending_reason under its badge", async () => {
    await page.evaluate(() => { location.hash = '#/runs/no-gpu/actions/gpu'; });
    const state = page.locator('.task[data-task="0"] .task-state');
    await state.locator('[data-state="PENDING"]').waitFor();
    await state.locator('.pending-reason', {hasText: 'no worker matches constraint gpu=EXISTS'}).waitFor();
    const bg = await background(state.locator('.badge'));
    assert.equal(bg, 'rgb(154, 103, 0)', 'pending is amber');
    await shot(page, '7b-pending-reason');
  });

  await step('follow a live log', async () => {
    await page.evaluate(() => { location.hash = '#/runs/talker/actions/talk'; });
    await page.locator('#logs', {hasText: 'line 3'}).waitFor();
    await page.locator('#logs-title', {hasText: 'following'}).waitFor();
    await shot(page, '8-log-following');
    touch('talker', 'stop');
    await page.locator('#logs', {hasText: 'last line'}).waitFor();
    await page.locator('#logs-title', {hasText: 'SUCCEEDED'}).waitFor();
    await shot(page, '9-log-ended');
  });

  await step('a run of 2 × 1,000 tasks renders in time, a node a step with its counts, and pages its tasks', () => wide(page));

  await step("a template's run shows its origin; the Workflows page lists the template with its params", () => templates(page));

  await step('the new-run form checks a YAML spec against its schema, and starts runs that succeed', () => newRunForm(page));

  await step("a run waiting for its concurrency key shows why; the Concurrency page shows the key's holder and line", async () => {
    const keyed = {concurrency: {key: '"deploy"', max_runs: 1}, steps: [{name: 'deploy', command: waitFile('go')}]};
    await createRun('deploy-1', keyed);
    await createRun('deploy-2', keyed);
    await page.evaluate(() => { location.hash = '#/runs/deploy-2'; });
    await page.locator('#run-waiting', {hasText: 'concurrency key "deploy": 1st in line for 1 slot'}).waitFor();
    await page.click('[data-nav="concurrency"]');
    const row = page.locator('tbody#keys tr[data-key="deploy"]');
    await row.locator('a', {hasText: 'deploy-1'}).waitFor();
    await row.locator('a', {hasText: 'deploy-2'}).waitFor();
    assert.match(await row.innerText(), /1\/1/, 'one slot of one is held');
    await shot(page, '9b-concurrency');
    touch('deploy-1', 'go');
    touch('deploy-2', 'go');
    await page.locator('tbody#keys', {hasText: 'No key is held or waited for.'}).waitFor();
  });

  await step('workers and aborts pages', async () => {
    await page.click('[data-nav="workers"]');
    await page.locator('tbody#workers tr[data-worker]').nth(1).waitFor();
    await page.locator('tbody#workers', {hasText: 'alive'}).waitFor();
    await shot(page, '10-workers');
    await page.click('[data-nav="aborts"]');
    await page.locator('tbody#aborts tr').first().waitFor();
    await shot(page, '11-aborts');
  });

  await step('axe-core: no serious or critical violation on the runs, run, action, workers and aborts pages', () => accessible(page));
  await step('the event stream client resumes with Last-Event-ID and stops at end', () => streamContract(page));
  if (!token) await step('a 401 asks for a token once and sends it after', () => tokenPrompt(page));
  // Last: it needs the schedules API and the scheduler's firing of a
  // triggered time.
  await step("a schedule's next times, pause, unpause and trigger", () => schedules(page));
}

// RENDER_MS bounds how long a page of the 2,000-task run takes to show
// what it must, from the navigation.
const RENDER_MS = 3000;

// wide waits for the run of two 1,000-task steps to succeed, then checks
// that its page draws one node a step with its tasks counted by state, and
// the steps table their counts, within RENDER_MS; and that the action page
// shows the step's counts and its tasks a page of 100 at a time, next to
// the last page and back.
async function wide(page) {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const r = await fetch(`${runs}/wide`, {headers: authz});
    const run = await r.json();
    assert.ok(r.ok, `GET wide: ${r.status}`);
    if (run.phase === 'SUCCEEDED') {
      assert.ok(run.actions.every((a) => a.tasks.length <= 100), 'GET of a run holds a page of tasks an action');
      break;
    }
    assert.ok(!run.ended_at, `wide ended ${run.phase}`);
    assert.ok(Date.now() < deadline, `wide is still ${run.phase}`);
    await new Promise((done) => setTimeout(done, 250));
  }

  let t0 = Date.now();
  await page.evaluate(() => { location.hash = '#/runs/wide'; });
  for (const s of ['w1', 'w2']) {
    const node = page.locator(`g.node[data-step="${s}"][data-phase="SUCCEEDED"][data-tasks="1000"]`);
    await node.locator('text.counts', {hasText: '1000 ok'}).waitFor();
    await page.locator(`tr[data-step="${s}"] .step-tasks [data-state="SUCCEEDED"]`, {hasText: '1000 succeeded'}).waitFor();
  }
  const runMs = Date.now() - t0;
  assert.equal(await page.locator('g.node').count(), 2, 'one node a step, not one a task');
  console.log(`     run page of 2,000 tasks shown in ${runMs} ms`);
  assert.ok(runMs < RENDER_MS, `the run page took ${runMs} ms`);
  await shot(page, '9c-wide-run');

  t0 = Date.now();
  await page.click('g.node[data-step="w1"]');
  await page.locator('#task-count', {hasText: '1000'}).waitFor();
  await page.locator('#action-counts [data-count="SUCCEEDED"]', {hasText: '1000'}).waitFor();
  await page.locator('.task[data-task="99"]').waitFor();
  const actionMs = Date.now() - t0;
  console.log(`     action page of 1,000 tasks shown in ${actionMs} ms`);
  assert.ok(actionMs < RENDER_MS, `the action page took ${actionMs} ms`);
  assert.equal(await page.locator('.task').count(), 100, 'a page of 100 tasks');
  assert.equal(await page.locator('#tasks-prev').isDisabled(), true);
  for (let p = 1; p < 10; p++) {
    await page.click('#tasks-next');
    await page.locator(`.task[data-task="${p * 100}"]`).waitFor();
    await page.locator('#tasks-range', {hasText: `page ${p + 1}: tasks ${p * 100 + 1}–${p * 100 + 100}`}).waitFor();
  }
  assert.equal(await page.locator('.task').count(), 100);
  await page.locator('#tasks-next:disabled').waitFor();
  await shot(page, '9d-wide-last-page');
  await page.click('#tasks-prev');
  await page.locator('.task[data-task="800"]').waitFor();
  assert.equal(await page.locator('.task[data-task="999"]').count(), 0);
}

// greeter is the template the template and schedule steps run.
const greeter = (description) => ({name: 'greeter', description, spec: {steps: [{name: 'greet', command: 'echo "hello $WHO x$TIMES"'}]},
  params: [{name: 'WHO', type: 'string', required: true, description: 'whom to greet'}, {name: 'TIMES', type: 'number', default: 2}]});

// templates pushes two versions of greeter, runs version 1 with a param,
// and checks the run page's origin and params, the Workflows list's params,
// and the template page's params, spec and versions.
async function templates(page) {
  assert.equal((await post('/workflows', greeter('greets'), 201)).version, 1);
  assert.equal((await post('/workflows', greeter('greets warmly'), 201)).version, 2);
  await post('/runs', {name: 'from-template', workflow: {name: 'greeter', version: 1}, params: {WHO: 'ann'}}, 201);

  await page.evaluate(() => { location.hash = '#/runs/from-template'; });
  await page.locator('#run-origin [data-origin="workflow"] a[href="#/workflows/greeter/versions/1"]').waitFor();
  assert.match(await page.textContent('#run-origin'), /from workflow greeter version 1/);
  await page.locator('#run-params [data-param="WHO"]', {hasText: 'WHO=ann'}).waitFor();
  await page.locator('#run-params [data-param="TIMES"]', {hasText: 'TIMES=2'}).waitFor();
  await page.locator('#run-phase [data-state="SUCCEEDED"]').waitFor();
  await shot(page, '12-template-run');

  await page.click('[data-nav="workflows"]');
  const row = page.locator('tr[data-workflow="greeter"]');
  await row.waitFor();
  assert.equal(await row.locator('td').nth(1).textContent(), '2', 'the latest version');
  assert.equal(await row.locator('.workflow-params [data-param="WHO"]').textContent(), 'WHO: string*');
  assert.equal(await row.locator('.workflow-params [data-param="TIMES"]').textContent(), 'TIMES: number = 2');
  await shot(page, '13-workflows');

  await row.locator('a').first().click();
  await page.locator('#workflow-version[data-version="2"]').waitFor();
  assert.equal(await page.locator('#workflow-versions tr[data-version]').count(), 2);
  const who = page.locator('#workflow-params tr[data-param="WHO"]');
  assert.equal(await who.locator('.param-type').textContent(), 'string');
  assert.equal(await who.locator('.param-required').textContent(), 'yes');
  assert.equal(await page.locator('#workflow-params tr[data-param="TIMES"] .param-default').textContent(), '2');
  assert.match(await page.textContent('#workflow-spec'), /hello \$WHO/);
  await page.click('#workflow-versions tr[data-version="1"] a');
  await page.locator('#workflow-version[data-version="1"]').waitFor();
  await page.locator('#workflow-meta', {hasText: 'greets ·'}).waitFor();
  await shot(page, '14-workflow-version');
}

// schedules creates an hourly schedule of greeter, and on its page checks
// its five next times, pauses it (no next time) and unpauses it through the
// confirmation, then triggers a run and follows it to the run page, which
// names the schedule.
async function schedules(page) {
  await post('/schedules', {name: 'hourly-greeting', workflow: {name: 'greeter'}, params: {WHO: 'the hour'}, interval: '1h'}, 201);
  await page.click('[data-nav="schedules"]');
  const row = page.locator('tr[data-schedule="hourly-greeting"]');
  await row.waitFor();
  await row.locator('.badge', {hasText: 'active'}).waitFor();
  await row.locator('a').first().click();

  await page.locator('#schedule-next li').nth(4).waitFor();
  assert.equal(await page.locator('#schedule-next li').count(), 5, 'the next 5 times');
  await page.locator('#schedule-counters [data-counter="skipped_overlap"]').waitFor();
  await shot(page, '15-schedule');

  await page.click('#schedule-controls button[data-op="pause"]');
  await page.locator('#confirm').waitFor({state: 'visible'});
  await page.click('#confirm-ok');
  await page.locator('#schedule-state[data-paused="true"]').waitFor();
  await page.locator('#schedule-next-none', {hasText: 'None while paused'}).waitFor();
  assert.equal(await page.locator('#schedule-next li').count(), 0);
  await shot(page, '16-schedule-paused');

  await page.click('#schedule-controls button[data-op="unpause"]');
  await page.click('#confirm-ok');
  await page.locator('#schedule-state[data-paused="false"]').waitFor();
  await page.locator('#schedule-next li').nth(4).waitFor();

  await page.click('#schedule-controls button[data-op="trigger"]');
  await page.locator('#confirm-overlap').waitFor();
  await page.click('#confirm-ok');
  const run = page.locator('#schedule-runs tr[data-run]').first();
  await run.waitFor();
  const name = await run.getAttribute('data-run');
  assert.match(name, /^hourly-greeting-\d{8}t\d{6}z$/, 'a scheduled run is named for its time');
  await run.locator('a').click();
  await page.locator('#run-origin [data-origin="schedule"] a[href="#/schedules/hourly-greeting"]').waitFor();
  await page.locator('#run-params [data-param="WHO"]', {hasText: 'WHO=the hour'}).waitFor();
  await shot(page, '17-scheduled-run');
}

// tokenPrompt (for an api without tokens) answers 401 to the workers list
// until it carries a bearer token: the page asks once, keeps the token for
// the tab, and retries with it.
async function tokenPrompt(page) {
  const seen = [];
  await page.route('**/v1/workers', (route) => {
    const auth = route.request().headers().authorization || '';
    seen.push(auth);
    if (auth === 'Bearer t0ken') return route.continue();
    return route.fulfill({status: 401, contentType: 'application/problem+json',
      body: JSON.stringify({type: 'about:blank', title: 'Unauthorized', status: 401, code: 'unauthenticated', detail: 'a bearer token is required'})});
  });
  try {
    await page.click('[data-nav="workers"]');
    await page.locator('#token').waitFor({state: 'visible'});
    await page.fill('#token-input', 't0ken');
    await page.click('#token button');
    await page.locator('tbody#workers tr[data-worker]').first().waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.getItem('capstan.token')), 't0ken');
    assert.equal(seen[0], '');
    assert.equal(seen.at(-1), 'Bearer t0ken');
    assert.equal(await page.locator('#token').isVisible(), false);
  } finally {
    await page.unrouteAll();
    await page.evaluate(() => sessionStorage.removeItem('capstan.token'));
  }
}

// ALL_IRIS is Iris's dashboard table: state → colour.
const ALL_IRIS = {PENDING: '#9a6700', ASSIGNED: '#bc4c00', BUILDING: '#8250df', RUNNING: '#0969da', SUCCEEDED: '#1a7f37',
  FAILED: '#cf222e', KILLED: '#57606a', WORKER_FAILED: '#8250df', UNSCHEDULABLE: '#cf222e', PREEMPTED: '#bc4c00'};

const rgb = (hex) => `rgb(${[1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)).join(', ')})`;

// irisColours serves an action whose one task holds an attempt in each Iris
// state (no real run reaches them all) and checks each badge's computed
// colour, and "(worker failure)" on the WORKER_FAILED one only.
async function irisColours(page) {
  const states = Object.keys(ALL_IRIS);
  const attempts = states.map((state, i) => ({id: 1000 + i, number: i + 1, state, created_at: new Date().toISOString(),
    ...(state === 'WORKER_FAILED' ? {cause: 'worker_lost', code: 'WorkerLost'} : {})}));
  const action = {name: 'every', kind: 'task', phase: 'RUNNING', tasks: [{index: 0, state: 'RUNNING', failure_count: 0,
    preemption_count: 1, max_retries_failure: 0, max_retries_preemption: 100, attempts}]};
  await page.route('**/runs/colours/actions/every', (route) =>
    route.fulfill({status: 200, contentType: 'application/json', body: JSON.stringify(action)}));
  try {
    await page.evaluate(() => { location.hash = '#/runs/colours/actions/every'; });
    await page.locator(`tr.attempt[data-attempt="${states.length}"]`).waitFor();
    for (const [i, state] of states.entries()) {
      const row = page.locator(`tr.attempt[data-attempt="${i + 1}"]`);
      const bg = await background(row.locator('.badge'));
      assert.equal(bg, rgb(ALL_IRIS[state]), `${state} colour`);
      assert.equal(await row.locator('.badge').textContent(), state.toLowerCase());
      assert.equal(await row.locator('.worker-failure').count(), state === 'WORKER_FAILED' ? 1 : 0, state);
    }
    await shot(page, '7a-iris-colours');
  } finally {
    await page.unrouteAll();
  }
}

// streamContract serves a run's event stream from the test (two responses
// that close: the first with event 7 and a keep-alive comment, the second
// with the run's end) and checks that the page re-fetches the run on events,
// reconnects with Last-Event-ID: 7 and the bearer token, and stops after end.
async function streamContract(page) {
  const calls = [];
  let gets = 0;
  const onRequest = (r) => { if (r.method() === 'GET' && new URL(r.url()).pathname.endsWith('/runs/live-dag')) gets++; };
  page.on('request', onRequest);
  await page.route('**/runs/live-dag/events', async (route) => {
    const h = route.request().headers();
    calls.push({last: h['last-event-id'] || '', auth: h.authorization || ''});
    const body = calls.length === 1
      ? 'id: 7\nevent: action_phase\ndata: {"id":7,"type":"action_phase","run":"live-dag"}\n\n: keep-alive\n\n'
      : 'id: 8\nevent: end\ndata: {"phase":"SUCCEEDED"}\n\n';
    await route.fulfill({status: 200, headers: {'Content-Type': 'text/event-stream'}, body});
  });
  try {
    await page.evaluate(() => { location.hash = '#/runs/live-dag'; });
    await page.waitForFunction(() => document.getElementById('live').className.trim() === 'live', null, {timeout: T});
    assert.equal(calls.length, 2, 'one reconnect, none after end');
    assert.equal(calls[0].last, '');
    assert.equal(calls[1].last, '7', 'the reconnect resumes after the last event seen');
    assert.equal(calls[1].auth, token ? `Bearer ${token}` : '');
    assert.ok(gets >= 3, `the run is re-fetched on load and on each event (${gets} GETs)`);
  } finally {
    page.off('request', onRequest);
    await page.unrouteAll();
  }
}

// fresh opens url in a new browser context, which shares nothing with the
// page the link was copied from, and whose localStorage names another
// project and domain: the URL's must win.
async function fresh(browser, url) {
  const ctx = await browser.newContext({viewport: {width: 1400, height: 900}});
  await ctx.addInitScript(() => {
    localStorage.setItem('capstan.project', 'elsewhere');
    localStorage.setItem('capstan.domain', 'nowhere');
  });
  const p = await ctx.newPage();
  p.setDefaultTimeout(T);
  p.on('pageerror', (e) => console.error('page error (fresh context):', e.message));
  await p.goto(url);
  await login(p);
  return {p, close: () => ctx.close()};
}

// deepLinks filters the runs list and a run's event history through the
// page's controls, copies each page's URL and opens it in a fresh browser
// context: the same project, domain, run, tab and filters show.
async function deepLinks(page, browser) {
  await page.evaluate(() => { location.hash = '#/runs'; });
  await page.selectOption('#runs-phase', 'SUCCEEDED');
  await page.fill('#runs-search', 'live');
  await page.waitForURL(/[#&?]q=live/);
  await page.locator('tr[data-run="to-abort"]').waitFor({state: 'detached'});
  const listURL = page.url();
  assert.match(listURL, /phase=SUCCEEDED/);
  let f = await fresh(browser, listURL);
  try {
    await f.p.locator('tr[data-run="live-dag"]').waitFor();
    assert.equal(await f.p.inputValue('#project'), project);
    assert.equal(await f.p.inputValue('#domain'), domain);
    assert.equal(await f.p.inputValue('#runs-phase'), 'SUCCEEDED');
    assert.equal(await f.p.inputValue('#runs-search'), 'live');
    assert.equal(await f.p.locator('tbody#runs tr[data-run]').count(), 1, 'only the filtered runs');
    await shot(f.p, '18-deep-link-runs');
  } finally { await f.close(); }

  await page.click('tr[data-run="live-dag"] a');
  await page.click('#run-tab-events');
  await page.locator('#run-events tr[data-event]').first().waitFor();
  await page.selectOption('#events-step', 'first');
  const type = await page.locator('#run-events tr[data-event]').first().getAttribute('data-type');
  await page.selectOption('#events-type', type);
  await page.waitForURL(/[#&?]type=/);
  const runURL = page.url();
  const want = await page.locator('#run-events tr[data-event]').evaluateAll((rows) => rows.map((r) => r.dataset.event));
  assert.ok(want.length > 0);
  f = await fresh(browser, runURL);
  try {
    await f.p.locator('#run-title', {hasText: 'live-dag'}).waitFor();
    assert.equal(await f.p.getAttribute('#run-tab-events', 'aria-selected'), 'true');
    assert.equal(await f.p.inputValue('#events-step'), 'first');
    assert.equal(await f.p.inputValue('#events-type'), type);
    await f.p.locator(`#run-events tr[data-event="${want.at(-1)}"]`).waitFor();
    const got = await f.p.locator('#run-events tr[data-event]').evaluateAll((rows) => rows.map((r) => r.dataset.event));
    assert.deepEqual(got, want, 'the same filtered events');
    assert.equal(await f.p.inputValue('#project'), project);
    await shot(f.p, '19-deep-link-run-events');
  } finally { await f.close(); }
}

// FOCUS_MS is how long a focused run link is watched while the list
// updates live.
const FOCUS_MS = 5000;

// keepsFocus focuses a run link of the runs list while a run steps
// through its steps (each step an event, each event a re-fetch and a
// redraw), and checks every 50 ms for FOCUS_MS that the same element, still
// in the page, has the focus, and that the list did change meanwhile.
async function keepsFocus(page) {
  await createRun('ticker', {steps: Array.from({length: 8}, (_, i) => ({name: `s${i}`, command: 'sleep 0.7'}))});
  await page.evaluate(() => { location.hash = '#/runs'; });
  await page.locator('tr[data-run="ticker"] .badge').waitFor();
  const link = page.locator('tr[data-run="live-dag"] a');
  await link.focus();
  await page.evaluate(() => {
    window.focusedLink = document.activeElement;
    window.listChanges = 0;
    new MutationObserver((m) => { window.listChanges += m.length; })
      .observe(document.getElementById('runs'), {subtree: true, childList: true, characterData: true, attributes: true});
  });
  const t0 = Date.now();
  while (Date.now() - t0 < FOCUS_MS) {
    const ok = await page.evaluate(() => document.activeElement === window.focusedLink && window.focusedLink.isConnected);
    assert.ok(ok, `the run link lost the focus after ${Date.now() - t0} ms`);
    await page.waitForTimeout(50); // the observation window's sampling period
  }
  const changes = await page.evaluate(() => window.listChanges);
  console.log(`     ${changes} changes to the list while the link kept the focus`);
  assert.ok(changes > 0, 'the list did not change during the window');
  assert.equal(await page.evaluate(() => document.activeElement.closest('tr')?.dataset.run), 'live-dag');
}

// graphByKeyboard opens a step from the graph with the keyboard alone:
// Tab from the top of the run page until a node has the focus, then Enter.
async function graphByKeyboard(page) {
  await page.evaluate(() => { location.hash = '#/runs/live-dag'; });
  await page.locator('g.node[data-step="second"][data-phase="SUCCEEDED"]').waitFor();
  await page.evaluate(() => document.activeElement?.blur());
  let on = '';
  for (let i = 0; i < 80 && on !== 'second'; i++) {
    await page.keyboard.press('Tab');
    on = await page.evaluate(() => document.activeElement?.closest?.('g.node')?.dataset.step || '');
  }
  assert.equal(on, 'second', 'Tab never reached the node of step second');
  await shot(page, '20-graph-node-focused');
  await page.keyboard.press('Enter');
  await page.waitForURL(/#\/runs\/live-dag\/actions\/second$/);
  await page.locator('#action-title', {hasText: 'second'}).waitFor();
}

const bodyBackground = (page) => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
const DARK_BG = 'rgb(13, 17, 23)';
const LIGHT_BG = 'rgb(255, 255, 255)';

// darkMode checks the theme: the system's dark scheme when the toggle
// says system, the toggle's choice over the system's, remembered across a
// reload; and takes the dark-mode screenshots.
async function darkMode(page) {
  await page.evaluate(() => { location.hash = '#/runs/live-dag'; });
  await page.locator('g.node[data-step="second"]').waitFor();
  assert.equal(await page.inputValue('#theme'), 'auto');
  assert.equal(await bodyBackground(page), LIGHT_BG);
  await page.emulateMedia({colorScheme: 'dark'});
  await page.waitForFunction((bg) => getComputedStyle(document.body).backgroundColor === bg, DARK_BG);
  await shot(page, '21-dark-run');
  await page.selectOption('#theme', 'light');
  assert.equal(await bodyBackground(page), LIGHT_BG, 'the toggle wins over the system');
  await page.emulateMedia({colorScheme: 'light'});
  await page.selectOption('#theme', 'dark');
  assert.equal(await bodyBackground(page), DARK_BG);
  await page.reload(); // the tab keeps its token (sessionStorage): no prompt
  await page.locator('g.node[data-step="second"]').waitFor();
  assert.equal(await page.inputValue('#theme'), 'dark', 'the theme is remembered');
  assert.equal(await bodyBackground(page), DARK_BG);
  await page.evaluate(() => { location.hash = '#/runs'; });
  await page.locator('tr[data-run="live-dag"]').waitFor();
  await shot(page, '22-dark-runs');
  await page.selectOption('#theme', 'auto');
  assert.equal(await bodyBackground(page), LIGHT_BG);
}

// eventHistory checks that the event history of the finished DAG run
// lists every event of its stream, in order, and filters by type and step.
async function eventHistory(page) {
  const all = await runEvents('live-dag');
  assert.ok(all.length >= 10, `live-dag has ${all.length} events`);
  await page.evaluate(() => { location.hash = '#/runs/live-dag?tab=events'; });
  await page.locator('#events-count', {hasText: `${all.length} of ${all.length} events`}).waitFor();
  const rows = () => page.locator('#run-events tr[data-event]').evaluateAll((trs) => trs.map((r) => r.dataset.event));
  assert.deepEqual(await rows(), all.map((e) => e.id), 'every event, in order');
  await shot(page, '23-event-history');
  const type = all.find((e) => e.step === 'second').type;
  await page.selectOption('#events-type', type);
  await page.selectOption('#events-step', 'second');
  const want = all.filter((e) => e.type === type && e.step === 'second').map((e) => e.id);
  await page.locator('#events-count', {hasText: `${want.length} of ${all.length} events`}).waitFor();
  assert.deepEqual(await rows(), want, 'the filtered events, in order');
  await page.selectOption('#events-type', '');
  await page.selectOption('#events-step', '');
  await page.click('#run-tab-spec');
  await page.locator('#run-spec', {hasText: 'depends_on'}).waitFor();
  assert.match(await page.textContent('#run-spec'), /mode: DAG/);
}

// newRunForm checks that the form refuses, before sending anything, a spec
// its JSON Schema refuses (naming the field), then starts a run of a YAML
// spec and one of the greeter template with a param, each to SUCCEEDED.
async function newRunForm(page) {
  const posts = [];
  const onRequest = (r) => { if (r.method() === 'POST' && new URL(r.url()).pathname.endsWith('/runs')) posts.push(r.url()); };
  page.on('request', onRequest);
  try {
    await page.evaluate(() => { location.hash = '#/new?mode=yaml'; });
    await page.locator('#new-yaml').waitFor();
    await page.fill('#new-yaml', 'spec:\n  mode: Sideways\n  steps:\n    - name: a\n      comand: echo a\n      replicas: many\n');
    await page.click('#new-submit');
    const err = page.locator('#new-yaml-error');
    await page.locator('#new-yaml-error', {hasText: 'spec.steps[0].comand: unknown field'}).waitFor();
    assert.match(await err.innerText(), /spec\.mode: .*StepByStep/);
    assert.match(await err.innerText(), /spec\.steps\[0\]\.replicas: .*integer/);
    assert.equal(await page.getAttribute('#new-yaml', 'aria-invalid'), 'true');
    await shot(page, '24-new-run-refused');
    assert.equal(posts.length, 0, 'nothing was sent');

    await page.fill('#new-yaml', 'spec:\n  mode: DAG\n  steps:\n    - name: a\n      command: echo a\n    - name: b\n      depends_on: [a]\n      command: echo b\n');
    await page.click('#new-check');
    await page.locator('#new-checked', {hasText: 'matches its schema'}).waitFor();
    await page.fill('#new-name', 'from-form');
    await page.click('#new-submit');
    await page.waitForURL(/#\/runs\/from-form$/);
    await page.locator('#run-phase [data-state="SUCCEEDED"]').waitFor();
    assert.equal(posts.length, 1);

    await page.evaluate(() => { location.hash = '#/new?mode=template&workflow=greeter'; });
    await page.locator('#new-param-WHO').waitFor();
    await page.fill('#new-param-WHO', 'the form');
    await page.fill('#new-name', 'from-form-template');
    await shot(page, '25-new-run-template');
    await page.click('#new-submit');
    await page.waitForURL(/#\/runs\/from-form-template$/);
    await page.locator('#run-origin [data-origin="workflow"]', {hasText: 'greeter'}).waitFor();
    await page.locator('#run-params [data-param="WHO"]', {hasText: 'WHO=the form'}).waitFor();
    await page.locator('#run-phase [data-state="SUCCEEDED"]').waitFor();
    await succeeded('from-form-template');
  } finally {
    page.off('request', onRequest);
  }
}

// AXE_PAGES are the pages axe-core checks: [name, fragment, what shows
// once the page is drawn].
const AXE_PAGES = [
  ['runs', '#/runs', 'tr[data-run="live-dag"]'],
  ['run', '#/runs/live-dag', 'g.node[data-step="second"]'],
  ['run events', '#/runs/live-dag?tab=events', '#run-events tr[data-event]'],
  ['action', '#/runs/retried/actions/flaky', 'tr.attempt[data-attempt="2"]'],
  ['workers', '#/workers', 'tbody#workers tr[data-worker]'],
  ['aborts', '#/aborts?state=all', 'tbody#aborts tr[data-run]'],
];

// accessible runs axe-core on each of AXE_PAGES, light and dark, and
// fails on any serious or critical violation, listing them.
async function accessible(page) {
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({colorScheme: scheme});
    for (const [name, hash, ready] of AXE_PAGES) {
      await page.evaluate((h) => { location.hash = h; }, hash);
      await page.locator(ready).first().waitFor();
      if (!await page.evaluate(() => !!window.axe)) await page.addScriptTag({path: AXE});
      const violations = await page.evaluate(async () => {
        const r = await window.axe.run(document, {resultTypes: ['violations']});
        return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
          .map((v) => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' '))}));
      });
      assert.deepEqual(violations, [], `axe-core on the ${name} page (${scheme}):\n${JSON.stringify(violations, null, 2)}`);
      console.log(`     axe-core: no serious or critical violation on the ${name} page (${scheme})`);
    }
  }
  await page.emulateMedia({colorScheme: 'light'});
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
