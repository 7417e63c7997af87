// run.js: one run: where it comes from (template and version, schedule and
// scheduled time, or trigger and event) and its params, and three views
// (the URL's tab): the overview (its workflow graph coloured by phase, a
// timeline of its steps' attempts on an axis, each step's outputs and
// cache status), its event history (every run_events row, filtered by type
// and step, growing live) and its spec as YAML with the params it ran
// with. The controls (abort the run or a step, suspend, resume,
// approve/reject, restart, delete) each sit behind a confirmation and show
// the API's problem detail when refused.

import {deleteJSON, getJSON, postJSON} from './api.js';
import {$, act, badge, base, enc, html, isTerminal, nothing, render, repeat, showError, span, stateName, time} from './dom.js';
import {countsOf, graph, timeline} from './graph.js';
import {watch, every} from './live.js';
import {origin, params as paramsOf, joined} from './origin.js';
import {onPrefs, timeMode} from './prefs.js';
import {href, param, setParams} from './url.js';
import {toYAML} from './yaml.js';
import {download} from './logs.js';

const awaitsDecision = (a) => a.kind === 'approval' && a.phase === 'PAUSED' && a.waiting_for === 'approval' && !a.approval;
const COMMENT = html`<label>Comment<br><textarea name="comment" id="confirm-comment" rows="3"></textarea></label>`;
const TABS = [['overview', 'Overview'], ['events', 'Event history'], ['spec', 'Spec']];
const EVENTS_PAGE = 200;

export function mount(view, {run: name}) {
  const path = `${base()}/runs/${enc(name)}`;
  const st = {
    run: null, tab: TABS.some(([t]) => t === param('tab')) ? param('tab') : 'overview',
    events: [], seen: new Set(), lastId: '', type: param('type'), step: param('step'),
    epage: Math.max(+param('epage', '1') - 1, 0) || 0,
  };
  let left = false;
  const load = async () => {
    try {
      const run = await getJSON(path);
      if (left) return;
      st.run = run;
      draw();
    } catch (e) { showError(e); }
  };
  // Events come in bursts (a stored history first): draw once a frame.
  let frame = 0;
  const drawSoon = () => { if (!frame) frame = requestAnimationFrame(() => { frame = 0; if (!left) draw(); }); };
  const onEvent = (ev) => {
    if (ev.event === 'end' || !ev.id || st.seen.has(ev.id)) return;
    let data = {};
    try { data = JSON.parse(ev.data); } catch (e) { /* shown by type and id alone */ }
    st.seen.add(ev.id);
    st.lastId = ev.id;
    st.events.push({id: +ev.id, type: data.type || ev.event, action: data.action || '', task_id: data.task_id,
      attempt_id: data.attempt_id, created_at: data.created_at, data: data.data || {}});
    if (st.tab === 'events') drawSoon();
  };
  const open = (step) => { location.hash = `#/runs/${enc(name)}/actions/${enc(step)}`; };
  const onControl = (op, step) => {
    if (!st.run) return;
    control(path, st.run, op, step).then((done) => {
      if (done && op === 'delete') location.hash = '#/runs';
      else if (done) rewatch();
    });
  };
  const ui = {
    open, onControl,
    setTab: (t, focus) => {
      st.tab = t;
      setParams({tab: t === 'overview' ? '' : t});
      draw();
      if (focus) view.querySelector(`#run-tab-${t}`)?.focus();
    },
    setFilter: (k, v) => { st[k] = v; st.epage = 0; setParams({[k]: v, epage: ''}); draw(); },
    setPage: (p) => { st.epage = p; setParams({epage: p ? p + 1 : ''}); draw(); },
    downloadSpec: () => st.run && download(`${name}.yaml`, specYAML(st.run)),
  };
  const draw = () => render(page(name, st, ui), view);
  // A terminal run's stream ends; a restart makes it live again, so every
  // accepted control re-opens the stream (which re-fetches the run), after
  // the last event already listed.
  let stopWatch = () => {};
  const rewatch = () => {
    stopWatch();
    load();
    stopWatch = watch(`${path}/events`, load, {onEvent, lastEventId: st.lastId});
  };
  draw();
  rewatch();
  const stopTick = every(1000, async () => st.run && (!st.run.ended_at || timeMode === 'relative') && draw());
  // A run waiting for a concurrency slot moves up its line with no event of
  // its own: re-fetch it while it waits.
  const stopWaiting = every(2000, async () => st.run?.pending_reason && load());
  const stopPrefs = onPrefs(draw);
  return () => { left = true; cancelAnimationFrame(frame); stopWatch(); stopTick(); stopWaiting(); stopPrefs(); };
}

function page(name, st, ui) {
  const run = st.run;
  if (!run) return html`<h2 id="run-title">${name}</h2><p class="muted">Loading…</p>`;
  const tabKey = (ev) => {
    const i = TABS.findIndex(([t]) => t === st.tab);
    const n = {ArrowRight: 1, ArrowLeft: -1}[ev.key];
    if (n) { ev.preventDefault(); ui.setTab(TABS[(i + n + TABS.length) % TABS.length][0], true); }
  };
  return html`<h2 id="run-title">${run.name} <span id="run-phase">${badge(run.phase)}</span>${run.suspended ? html` <span class="muted">(suspended)</span>` : nothing}</h2>
    <p id="run-origin">from ${origin(run)}</p>
    <p id="run-params" class="kv">${run.params && Object.keys(run.params).length ? html`params ${paramsOf(run.params)}` : nothing}</p>
    <p id="run-kin" class="kv">${kin(run)}</p>
    <p id="run-waiting" class="pending-reason">${run.pending_reason ? html`waiting: ${run.pending_reason} · <a href="#/concurrency">slots</a>` : nothing}</p>
    <p id="run-meta" class="muted">mode ${run.spec.mode || 'StepByStep'} · started ${time(run.created_at)} · duration ${span(run.created_at, run.ended_at)}${
      run.ended_at ? html` · ended ${time(run.ended_at)}` : nothing}${run.expires_at ? html` · deleted by retention at ${time(run.expires_at)}` : nothing}</p>
    <p class="controls" id="run-controls">${runButtons(run, ui.onControl)}</p>
    <div class="tabs" role="tablist" aria-label="views of the run" @keydown=${tabKey}>
      ${TABS.map(([t, label]) => html`<button role="tab" id="run-tab-${t}" aria-controls="run-panel" aria-selected=${t === st.tab ? 'true' : 'false'}
        tabindex=${t === st.tab ? '0' : '-1'} @click=${() => ui.setTab(t)}>${label}${t === 'events' ? html` <span class="count">${st.events.length}</span>` : nothing}</button>`)}
    </div>
    <section id="run-panel" role="tabpanel" aria-labelledby="run-tab-${st.tab}">
      ${st.tab === 'events' ? eventsPanel(run, st, ui) : st.tab === 'spec' ? specPanel(run, ui) : overview(run, ui)}
    </section>`;
}

function overview(run, ui) {
  const acts = new Map(run.actions.map((a) => [a.name, a]));
  const steps = (run.spec.steps || []).map((s) => acts.get(s.name) || {name: s.name, phase: 'QUEUED', kind: s.kind || 'task'});
  return html`<div class="graph" id="run-graph">${graph(run, ui.open)}</div>
    <h3>Timeline</h3><div class="timeline" id="run-timeline">${timeline(run, span)}</div>
    <h3>Steps</h3><table><thead><tr><th scope="col">step</th><th scope="col">phase</th><th scope="col">tasks</th><th scope="col">started</th>
      <th scope="col">duration</th><th scope="col">cache</th><th scope="col">outputs</th><th scope="col">notes</th><th scope="col"><span class="sr-only">controls</span></th></tr></thead>
    <tbody id="run-steps">${repeat(steps, (a) => a.name, (a) => stepRow(run, a, ui.onControl))}</tbody></table>`;
}

// specYAML is what the run ran: its template (if any), its params and its
// spec, as one YAML document.
function specYAML(run) {
  const doc = {};
  if (run.workflow) doc.workflow = run.workflow;
  if (run.params && Object.keys(run.params).length) doc.params = run.params;
  doc.spec = run.spec;
  return toYAML(doc);
}

function specPanel(run, ui) {
  return html`<div class="toolbar">
      <a class="button" id="spec-rerun" href=${href('#/new', {from: run.name})}>Start a run of this spec…</a>
      <button id="spec-download" @click=${ui.downloadSpec}>Download YAML</button></div>
    <pre class="spec" id="run-spec" role="region" tabindex="0" aria-label="the run's spec as YAML">${specYAML(run)}</pre>`;
}

// eventsPanel is the run's event history: every run_events row in id
// order, as the run's event stream replays them and then sends them live,
// filtered by type and step, a page of EVENTS_PAGE at a time.
function eventsPanel(run, st, ui) {
  const types = [...new Set([...st.events.map((e) => e.type), ...(st.type ? [st.type] : [])])].sort();
  const steps = [...new Set(['a0', ...(run.spec.steps || []).map((s) => s.name), ...st.events.map((e) => e.action).filter(Boolean),
    ...(st.step ? [st.step] : [])])];
  const shown = st.events.filter((e) => (!st.type || e.type === st.type) && (!st.step || e.action === st.step));
  const pages = Math.max(Math.ceil(shown.length / EVENTS_PAGE), 1);
  const p = Math.min(st.epage, pages - 1);
  const rows = shown.slice(p * EVENTS_PAGE, (p + 1) * EVENTS_PAGE);
  return html`<div class="toolbar">
      <label>type <select id="events-type" @change=${(ev) => ui.setFilter('type', ev.target.value)}>
        <option value="" ?selected=${!st.type}>any type</option>${types.map((t) => html`<option ?selected=${t === st.type}>${t}</option>`)}</select></label>
      <label>step <select id="events-step" @change=${(ev) => ui.setFilter('step', ev.target.value)}>
        <option value="" ?selected=${!st.step}>any step</option>${steps.map((s) => html`<option ?selected=${s === st.step}>${s}</option>`)}</select></label>
      <span id="events-count" class="muted" aria-live="polite">${shown.length} of ${st.events.length} events</span>
      ${pages > 1 ? html`<button id="events-prev" ?disabled=${p === 0} @click=${() => ui.setPage(p - 1)}>← earlier</button>
        <span class="muted">page ${p + 1} of ${pages}</span>
        <button id="events-next" ?disabled=${p >= pages - 1} @click=${() => ui.setPage(p + 1)}>later →</button>` : nothing}
    </div>
    <table class="events"><thead><tr><th scope="col">#</th><th scope="col">time</th><th scope="col">type</th><th scope="col">step</th>
      <th scope="col">task / attempt</th><th scope="col">details</th></tr></thead>
    <tbody id="run-events">${rows.length ? repeat(rows, (e) => e.id, (e) => eventRow(run, e))
      : html`<tr><td colspan="6" class="muted">${st.events.length ? 'No event matches.' : 'No events (yet).'}</td></tr>`}</tbody></table>`;
}

const valueText = (v) => {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.length > 200 ? s.slice(0, 200) + '…' : s;
};

function eventRow(run, e) {
  const data = Object.entries(e.data || {});
  return html`<tr data-event=${e.id} data-type=${e.type} data-step=${e.action}>
    <td>${e.id}</td><td class="muted">${time(e.created_at)}</td><td><code>${e.type}</code></td>
    <td>${e.action ? html`<a href="#/runs/${enc(run.name)}/actions/${enc(e.action)}">${e.action}</a>` : nothing}</td>
    <td class="muted">${e.task_id ? `task ${e.task_id}` : ''}${e.attempt_id ? ` · attempt ${e.attempt_id}` : ''}</td>
    <td class="kv">${joined(data.map(([k, v]) => html`<code>${k}</code> ${valueText(v)}`), ' · ')}</td></tr>`;
}

// kin links a child run to its parent run and step, and a run to the
// child runs of its workflow steps; nothing for a run with neither.
function kin(run) {
  const parts = [];
  if (run.parent) {
    parts.push(html`<span data-kin="parent">parent <a href="#/runs/${enc(run.parent.run)}">${run.parent.run}</a> step
      <a href="#/runs/${enc(run.parent.run)}/actions/${enc(run.parent.action)}">${run.parent.action}</a></span>`);
  }
  const kids = run.children || [];
  if (kids.length) {
    parts.push(html`children ${joined(kids.map((c) => html`<a data-kin="child" href="#/runs/${enc(c.name)}" title="step ${c.action} index ${c.index}">${c.name}</a> ${badge(c.phase)}`), ' ')}`);
  }
  return joined(parts);
}

function runButtons(run, on) {
  const b = (op, label, cls = '') => html`<button data-op=${op} class=${cls} @click=${() => on(op)}>${label}</button>`;
  if (isTerminal(run.phase)) return [b('restart', 'Restart…'), b('delete', 'Delete run', 'danger')];
  return [b('abort', 'Abort run', 'danger'), run.suspended ? b('resume', 'Resume') : b('suspend', 'Suspend'),
    !run.suspended && run.phase === 'PAUSED' ? b('resume', 'Resume') : nothing];
}

function stepRow(run, a, on) {
  const b = (op, label, cls = '') => html`<button data-op=${op} data-step=${a.name} class=${cls} @click=${() => on(op, a.name)}>${label}</button>`;
  const ops = [];
  if (awaitsDecision(a)) ops.push(b('approve', 'Approve', 'primary'), b('reject', 'Reject'));
  if (a.started_at && !isTerminal(a.phase)) ops.push(b('abort-step', 'Abort', 'danger'));
  if (isTerminal(run.phase)) ops.push(b('restart', 'Restart from here'));
  const outs = Object.entries(a.outputs || {}).map(([k, v]) => html`<div class="kv"><code>${k}</code> ${String(v).slice(0, 200)}</div>`);
  const cache = a.cache_status ? html`${a.cache_status}${a.cache_key ? html`<div class="kv muted" title=${a.cache_key}>${a.cache_key.slice(0, 12)}…</div>` : nothing}` : nothing;
  return html`<tr data-step=${a.name}><td><a href="#/runs/${enc(run.name)}/actions/${enc(a.name)}">${a.name}</a>
      <div class="muted kv">${a.kind}${a.depends_on?.length ? ` · after ${a.depends_on.join(', ')}` : ''}</div></td>
    <td class="step-phase">${badge(a.phase)}</td><td class="step-tasks">${tasksCell(a)}</td><td class="muted">${time(a.started_at)}</td><td>${span(a.started_at, a.ended_at)}</td>
    <td>${cache}</td><td>${outs}</td><td>${notes(a)}</td><td class="controls">${ops}</td></tr>`;
}

// tasksCell is a step's task count and its tasks by state, e.g. "10000:
// 9990 succeeded, 10 running"; empty for a step without tasks.
function tasksCell(a) {
  if (!a.task_count) return nothing;
  const by = joined(countsOf(a).map(([st, n]) => html`<span data-state=${st}>${n} ${stateName(st)}</span>`), ', ');
  return html`<span class="task-count">${a.task_count}</span>: ${by}`;
}

// notes says what a step waits for, why it ended, its retries, abort and approval.
function notes(a) {
  const n = [];
  if (a.waiting_for) n.push(html`waiting for ${a.waiting_for}${a.not_before ? html` until ${time(a.not_before)}` : nothing}`);
  if (a.reason) n.push(html`reason: ${a.reason}`);
  if (a.step_retries) n.push(html`step retries ${a.step_retries}`);
  if (a.abort) {
    n.push(html`abort: ${a.abort.outcome === 'needs_intervention' ? html`<b>manual intervention may be required</b>` : a.abort.outcome || 'delivering'} (${a.abort.attempt_count} attempt(s))`);
  }
  if (a.approval) {
    n.push(html`<span class="approval">${a.approval.decision}${a.approval.token_name ? ` by token ${a.approval.token_name}` : ''}${a.approval.by ? ` as ${a.approval.by}` : ''}${a.approval.comment ? `: “${a.approval.comment}”` : ''}</span>`);
  }
  return joined(n, html`<br>`);
}

// control confirms and sends one control request; it resolves true when sent.
function control(path, run, op, step) {
  const who = $('who').value;
  switch (op) {
    case 'abort':
      return act(`Abort run ${run.name}? Every running step is killed.`, nothing, () => postJSON(`${path}/abort`, {reason: 'aborted from the dashboard'}));
    case 'abort-step':
      return act(`Abort step ${step} of run ${run.name}?`, nothing, () => postJSON(`${path}/actions/${enc(step)}/abort`, {reason: 'aborted from the dashboard'}));
    case 'suspend':
    case 'resume':
      return act(`${op === 'suspend' ? 'Suspend' : 'Resume'} run ${run.name}?`, nothing, () => postJSON(`${path}/${op}`, {}));
    case 'approve':
    case 'reject':
      return act(`${op === 'approve' ? 'Approve' : 'Reject'} step ${step} of run ${run.name}?`, COMMENT, (form) => {
        const body = {};
        if (form.comment.value.trim()) body.comment = form.comment.value.trim();
        if (who) body.by = who;
        return postJSON(`${path}/actions/${enc(step)}/${op}`, body);
      });
    case 'delete':
      return act(`Delete run ${run.name}${run.children?.length ? ' and its child runs' : ''}? Its steps, tasks, attempts, logs and events are deleted.`,
        nothing, () => deleteJSON(path));
    case 'restart':
      return act(`Restart run ${run.name}?`, html`<label>From step<br><select name="from_step" id="confirm-step">
          <option value="">every step that did not succeed</option>
          ${(run.spec.steps || []).map((s) => html`<option ?selected=${s.name === step}>${s.name}</option>`)}</select></label>`,
        (form) => postJSON(`${path}/restart`, form.from_step.value ? {from_step: form.from_step.value} : {}));
  }
  return Promise.resolve(false);
}
