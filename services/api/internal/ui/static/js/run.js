// run.js: one run: where it comes from (template and version, schedule and
// scheduled time, or trigger and event) and its params, its workflow graph
// coloured by phase, a timeline of its actions, each step's outputs and
// cache status, and the controls (abort the run or a step, suspend, resume,
// approve/reject, restart, delete), each behind a confirmation and showing
// the API's problem detail when refused.

import {deleteJSON, getJSON, postJSON} from './api.js';
import {$, act, badge, base, enc, esc, fmtTime, isTerminal, showError, span} from './dom.js';
import {countsOf, drawGraph, drawTimeline} from './graph.js';
import {watch, every} from './live.js';
import {originHTML, paramsHTML} from './origin.js';

const awaitsDecision = (a) => a.kind === 'approval' && a.phase === 'PAUSED' && a.waiting_for === 'approval' && !a.approval;
const COMMENT = '<label>Comment<br><textarea name="comment" id="confirm-comment" rows="3"></textarea></label>';

export function mount(view, {run: name}) {
  const path = `${base()}/runs/${enc(name)}`;
  view.innerHTML = `<h2 id="run-title"></h2><p id="run-origin"></p><p id="run-params" class="kv"></p><p id="run-kin" class="kv"></p><p id="run-waiting" class="pending-reason"></p><p id="run-meta" class="muted"></p>
    <p class="controls" id="run-controls"></p>
    <div class="graph" id="run-graph"></div>
    <h3>Timeline</h3><div class="timeline" id="run-timeline"></div>
    <h3>Steps</h3><table><thead><tr><th>step</th><th>phase</th><th>tasks</th><th>started</th><th>duration</th><th>cache</th><th>outputs</th><th>notes</th><th></th></tr></thead>
    <tbody id="run-steps"></tbody></table>`;
  let run = null;
  const load = async () => {
    try {
      run = await getJSON(path);
      draw(view, run);
    } catch (e) { showError(e); }
  };
  view.addEventListener('click', (ev) => {
    const node = ev.target.closest('g.node[data-step]');
    if (node) { location.hash = `#/runs/${enc(name)}/actions/${enc(node.dataset.step)}`; return; }
    const b = ev.target.closest('button[data-op]');
    if (b && run) control(path, run, b.dataset.op, b.dataset.step).then((done) => {
      if (done && b.dataset.op === 'delete') location.hash = '#/runs';
      else if (done) rewatch();
    });
  });
  // A terminal run's stream ends; a restart makes it live again, so every
  // accepted control re-opens the stream (which re-fetches the run).
  let stopWatch = () => {};
  const rewatch = () => { stopWatch(); load(); stopWatch = watch(`${path}/events`, load); };
  rewatch();
  const stopTick = every(1000, async () => run && !run.ended_at && drawTimes(view, run));
  // A run waiting for a concurrency slot moves up its line with no event of
  // its own: re-fetch it while it waits.
  const stopWaiting = every(2000, async () => run && run.pending_reason && load());
  return () => { stopWatch(); stopTick(); stopWaiting(); };
}

function draw(view, run) {
  const q = (id) => view.querySelector('#' + id);
  q('run-title').innerHTML = `${esc(run.name)} <span id="run-phase">${badge(run.phase)}</span>${run.suspended ? ' <span class="muted">(suspended)</span>' : ''}`;
  q('run-origin').innerHTML = 'from ' + originHTML(run);
  q('run-params').innerHTML = run.params && Object.keys(run.params).length ? 'params ' + paramsHTML(run.params) : '';
  q('run-kin').innerHTML = kinHTML(run);
  q('run-waiting').innerHTML = run.pending_reason ? `waiting: ${esc(run.pending_reason)} · <a href="#/concurrency">slots</a>` : '';
  q('run-controls').innerHTML = runButtons(run);
  q('run-graph').innerHTML = drawGraph(run);
  const acts = new Map(run.actions.map((a) => [a.name, a]));
  q('run-steps').innerHTML = (run.spec.steps || []).map((s) => stepRow(run, acts.get(s.name) || {name: s.name, phase: 'QUEUED', kind: s.kind || 'task'})).join('');
  drawTimes(view, run);
}

// kinHTML links a child run to its parent run and step, and a run to the
// child runs of its workflow steps; "" for a run with neither.
function kinHTML(run) {
  const parts = [];
  if (run.parent) {
    parts.push(`<span data-kin="parent">parent <a href="#/runs/${enc(run.parent.run)}">${esc(run.parent.run)}</a> step ` +
      `<a href="#/runs/${enc(run.parent.run)}/actions/${enc(run.parent.action)}">${esc(run.parent.action)}</a></span>`);
  }
  const kids = run.children || [];
  if (kids.length) {
    parts.push('children ' + kids.map((c) => `<a data-kin="child" href="#/runs/${enc(c.name)}" title="step ${esc(c.action)} index ${esc(c.index)}">` +
      `${esc(c.name)}</a> ${badge(c.phase)}`).join(' '));
  }
  return parts.join(' · ');
}

function drawTimes(view, run) {
  view.querySelector('#run-meta').textContent = `mode ${run.spec.mode || 'StepByStep'} · started ${fmtTime(run.created_at)} · ` +
    `duration ${span(run.created_at, run.ended_at)}${run.ended_at ? ' · ended ' + fmtTime(run.ended_at) : ''}` +
    (run.expires_at ? ` · deleted by retention at ${fmtTime(run.expires_at)}` : '');
  view.querySelector('#run-timeline').innerHTML = drawTimeline(run, span);
}

function runButtons(run) {
  const b = [];
  if (!isTerminal(run.phase)) {
    b.push('<button data-op="abort" class="danger">Abort run</button>');
    b.push(run.suspended ? '<button data-op="resume">Resume</button>' : '<button data-op="suspend">Suspend</button>');
    if (!run.suspended && run.phase === 'PAUSED') b.push('<button data-op="resume">Resume</button>');
  } else {
    b.push('<button data-op="restart">Restart…</button>');
    b.push('<button data-op="delete" class="danger">Delete run</button>');
  }
  return b.join('');
}

function stepRow(run, a) {
  const ops = [];
  if (awaitsDecision(a)) {
    ops.push(`<button data-op="approve" data-step="${esc(a.name)}" class="primary">Approve</button>`);
    ops.push(`<button data-op="reject" data-step="${esc(a.name)}">Reject</button>`);
  }
  if (a.started_at && !isTerminal(a.phase)) ops.push(`<button data-op="abort-step" data-step="${esc(a.name)}" class="danger">Abort</button>`);
  if (isTerminal(run.phase)) ops.push(`<button data-op="restart" data-step="${esc(a.name)}">Restart from here</button>`);
  const outs = Object.entries(a.outputs || {}).map(([k, v]) => `<div class="kv"><code>${esc(k)}</code> ${esc(String(v).slice(0, 200))}</div>`).join('');
  const cache = a.cache_status ? `${esc(a.cache_status)}${a.cache_key ? `<div class="kv muted" title="${esc(a.cache_key)}">${esc(a.cache_key.slice(0, 12))}…</div>` : ''}` : '';
  return `<tr data-step="${esc(a.name)}"><td><a href="#/runs/${enc(run.name)}/actions/${enc(a.name)}">${esc(a.name)}</a>
      <div class="muted kv">${esc(a.kind)}${a.depends_on?.length ? ' · after ' + esc(a.depends_on.join(', ')) : ''}</div></td>
    <td class="step-phase">${badge(a.phase)}</td><td class="step-tasks">${tasksCell(a)}</td><td class="muted">${fmtTime(a.started_at)}</td><td>${span(a.started_at, a.ended_at)}</td>
    <td>${cache}</td><td>${outs}</td><td>${notes(a)}</td><td class="controls">${ops.join('')}</td></tr>`;
}

// tasksCell is a step's task count and its tasks by state, e.g. "10000:
// 9990 succeeded, 10 running"; empty for a step without tasks.
function tasksCell(a) {
  if (!a.task_count) return '';
  const by = countsOf(a).map(([st, n]) => `<span data-state="${esc(st)}">${n} ${esc(st.toLowerCase())}</span>`).join(', ');
  return `<span class="task-count">${a.task_count}</span>: ${by}`;
}

// notes says what a step waits for, why it ended, its retries, abort and approval.
function notes(a) {
  const n = [];
  if (a.waiting_for) n.push(`waiting for ${esc(a.waiting_for)}${a.not_before ? ' until ' + fmtTime(a.not_before) : ''}`);
  if (a.reason) n.push(`reason: ${esc(a.reason)}`);
  if (a.step_retries) n.push(`step retries ${a.step_retries}`);
  if (a.abort) n.push(`abort: ${a.abort.outcome === 'needs_intervention' ? '<b>manual intervention may be required</b>' : esc(a.abort.outcome || 'delivering')} (${a.abort.attempt_count} attempt(s))`);
  if (a.approval) n.push(`<span class="approval">${esc(a.approval.decision)}${a.approval.token_name ? ' by token ' + esc(a.approval.token_name) : ''}${a.approval.by ? ' as ' + esc(a.approval.by) : ''}${a.approval.comment ? ': “' + esc(a.approval.comment) + '”' : ''}</span>`);
  return n.join('<br>');
}

// control confirms and sends one control request; it resolves true when sent.
function control(path, run, op, step) {
  const who = $('who').value;
  switch (op) {
    case 'abort':
      return act(`Abort run ${run.name}? Every running step is killed.`, '', () => postJSON(`${path}/abort`, {reason: 'aborted from the dashboard'}));
    case 'abort-step':
      return act(`Abort step ${step} of run ${run.name}?`, '', () => postJSON(`${path}/actions/${enc(step)}/abort`, {reason: 'aborted from the dashboard'}));
    case 'suspend':
    case 'resume':
      return act(`${op === 'suspend' ? 'Suspend' : 'Resume'} run ${run.name}?`, '', () => postJSON(`${path}/${op}`, {}));
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
        '', () => deleteJSON(path));
    case 'restart': {
      const opts = ['<option value="">every step that did not succeed</option>', ...(run.spec.steps || []).map((s) =>
        `<option ${s.name === step ? 'selected' : ''}>${esc(s.name)}</option>`)].join('');
      return act(`Restart run ${run.name}?`, `<label>From step<br><select name="from_step" id="confirm-step">${opts}</select></label>`,
        (form) => postJSON(`${path}/restart`, form.from_step.value ? {from_step: form.from_step.value} : {}));
    }
  }
  return Promise.resolve(false);
}
