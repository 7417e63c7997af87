// action.js: one action: its tasks counted by state, and a page of its
// tasks (previous/next through the API's cursor, so that a step of 10,000
// tasks renders a page at a time) with their attempt history, each attempt
// with its Iris badge, "(worker failure)" on worker-failure attempts, the
// pending_reason under a PENDING task's badge, each attempt's cause and error
// code; and an attempt's logs, followed live while it runs.

import {getJSON, postJSON, stream} from './api.js';
import {act, badge, base, enc, esc, fmtTime, isTerminal, showError, span} from './dom.js';
import {watch} from './live.js';

const RECONNECT_MS = 1000; // wait before resuming a broken log stream

const workerFailure = (at) => at.state === 'WORKER_FAILED' || at.cause === 'worker_lost';

export function mount(view, {run: runName, action: name}) {
  const path = `${base()}/runs/${enc(runName)}/actions/${enc(name)}`;
  view.innerHTML = `<p><a href="#/runs/${enc(runName)}">← run ${esc(runName)}</a></p>
    <h2 id="action-title"></h2><p id="action-meta" class="muted"></p><p class="controls" id="action-controls"></p>
    <p id="action-counts"></p>
    <div class="pager" id="tasks-pager"><button data-op="prev" id="tasks-prev" disabled>← previous</button>
      <span id="tasks-range" class="muted"></span><button data-op="next" id="tasks-next" disabled>next →</button></div>
    <div id="tasks"></div>
    <h3 id="logs-title">Logs</h3><pre class="logs" id="logs"></pre>`;
  const logs = logPanel(view, path);
  let action = null;
  // cursors[page] is the cursor of each page seen so far ('' the first);
  // an event re-fetches the page shown.
  const cursors = [''];
  let page = 0;
  let left = false; // the page was left: an answer still on its way draws nothing
  const load = async () => {
    try {
      const shown = page;
      const cursor = cursors[shown];
      const a = await getJSON(cursor ? `${path}?cursor=${enc(cursor)}` : path);
      if (left || shown !== page) return; // left, or the user paged meanwhile
      action = a;
      if (a.tasks_next_cursor) cursors[page + 1] = a.tasks_next_cursor;
      else cursors.length = page + 1;
      draw(view, runName, action, page);
      logs.autoPick(action);
    } catch (e) { showError(e); }
  };
  view.addEventListener('click', async (ev) => {
    const b = ev.target.closest('button[data-op]');
    if (!b) return;
    if (b.dataset.op === 'next' && cursors[page + 1] !== undefined) { page++; load(); }
    if (b.dataset.op === 'prev' && page > 0) { page--; load(); }
    if (b.dataset.op === 'logs') logs.pick(+b.dataset.task, +b.dataset.attempt, +b.dataset.gen, true);
    if (b.dataset.op === 'abort' && await act(`Abort step ${name} of run ${runName}?`, '',
      () => postJSON(`${path}/abort`, {reason: 'aborted from the dashboard'}))) load();
  });
  load();
  const stopWatch = watch(`${base()}/runs/${enc(runName)}/events`, load);
  return () => { left = true; stopWatch(); logs.stop(); };
}

// PAGE is the API's page size (GET .../actions/{action} without limit).
const PAGE = 100;

function draw(view, runName, a, page) {
  view.querySelector('#action-title').innerHTML = `${esc(runName)} / ${esc(a.name)} ${badge(a.phase)}`;
  view.querySelector('#action-meta').textContent = `${a.kind} · started ${fmtTime(a.started_at) || '—'} · duration ${span(a.started_at, a.ended_at) || '—'}` +
    `${a.generation ? ' · generation ' + a.generation : ''}${a.cache_status ? ' · cache ' + a.cache_status : ''}${a.reason ? ' · ' + a.reason : ''}`;
  view.querySelector('#action-controls').innerHTML = a.started_at && !isTerminal(a.phase) ? '<button data-op="abort" class="danger">Abort step</button>' : '';
  const counts = Object.entries(a.task_counts || {}).map(([st, n]) => `${badge(st)} <span data-count="${esc(st)}">${n}</span>`);
  view.querySelector('#action-counts').innerHTML = a.task_count
    ? `<span id="task-count">${a.task_count}</span> tasks${a.generation ? ' in generation ' + a.generation : ''}: ${counts.join(' ')}` : '';
  const first = page * PAGE;
  view.querySelector('#tasks-range').textContent = a.tasks.length ? `page ${page + 1}: tasks ${first + 1}–${first + a.tasks.length}` : '';
  view.querySelector('#tasks-prev').disabled = page === 0;
  view.querySelector('#tasks-next').disabled = !a.tasks_next_cursor;
  view.querySelector('#tasks-pager').hidden = page === 0 && !a.tasks_next_cursor;
  view.querySelector('#tasks').innerHTML = a.tasks.length ? a.tasks.map(taskBlock).join('') : '<p class="muted">No tasks (yet).</p>';
}

function taskBlock(t) {
  const gen = t.generation ?? 0;
  const reason = t.state === 'PENDING' && t.pending_reason ? `<div class="pending-reason">${esc(t.pending_reason)}</div>` : '';
  return `<div class="task" data-task="${t.index}" data-gen="${gen}">
    <h3>task ${t.index}${gen ? ` <span class="muted">(generation ${gen})</span>` : ''} <span class="task-state">${badge(t.state)}${reason}</span>${t.reused ? ' <span class="muted">(reused)</span>' : ''}</h3>
    ${t.item != null ? `<p class="kv task-item">item <code>${esc(t.item.length > 200 ? t.item.slice(0, 200) + '…' : t.item)}</code></p>` : ''}
    <p class="muted kv">failures ${t.failure_count}/${t.max_retries_failure} · preemptions ${t.preemption_count}/${t.max_retries_preemption}` +
    `${t.max_system_failures != null ? ` · system failures ${t.system_failure_count ?? 0}/${t.max_system_failures}` : ''}${t.worker_id ? ' · worker ' + esc(t.worker_id) : ''}</p>
    <table><thead><tr><th>attempt</th><th>state</th><th>cause</th><th>code</th><th>exit</th><th>error</th><th>started</th><th>duration</th><th></th></tr></thead><tbody>
    ${t.attempts.map((at) => attemptRow(t, gen, at)).join('')}</tbody></table></div>`;
}

function attemptRow(t, gen, at) {
  return `<tr class="attempt" data-task="${t.index}" data-attempt="${at.number}" data-state="${esc(at.state)}">
    <td>#${at.number}</td><td>${badge(at.state)}${workerFailure(at) ? ' <span class="worker-failure">(worker failure)</span>' : ''}</td>
    <td>${esc(at.cause || '')}</td><td>${esc(at.code || '')}</td><td>${at.exit_code ?? ''}</td><td>${esc(at.error || '')}</td>
    <td class="muted">${fmtTime(at.started_at || at.created_at)}</td><td>${span(at.started_at, at.finished_at)}</td>
    <td><button data-op="logs" data-task="${t.index}" data-attempt="${at.number}" data-gen="${gen}">logs</button></td></tr>`;
}

// logPanel shows one attempt's output: GET .../logs?follow=true streams it,
// live while the attempt runs, and ends once it ended. Until the user picks
// an attempt, it follows the newest attempt of the first task.
function logPanel(view, path) {
  const pre = view.querySelector('#logs');
  let ctl = null;
  let key = '';
  let chosen = false;
  const pick = (task, attempt, gen, byUser) => {
    if (byUser) chosen = true;
    const k = `${task}/${attempt}/${gen}`;
    if (k === key) return;
    key = k;
    if (ctl) ctl.abort();
    ctl = new AbortController();
    pre.innerHTML = '';
    view.querySelector('#logs-title').textContent = `Logs: task ${task} attempt #${attempt} (following)`;
    follow(`${path}/tasks/${task}/attempts/${attempt}/logs?follow=true&generation=${gen}`, pre, ctl.signal)
      .then((state) => {
        const title = view.querySelector('#logs-title'); // gone once the page is left
        if (key === k && title) title.textContent = `Logs: task ${task} attempt #${attempt}${state ? ' — ' + state : ''}`;
      });
  };
  return {
    pick,
    autoPick(a) {
      const t = a.tasks[0];
      const at = t?.attempts[t.attempts.length - 1];
      if (!chosen && at) pick(t.index, at.number, t.generation ?? 0, false);
    },
    stop() { if (ctl) ctl.abort(); },
  };
}

// follow appends stdout and stderr events to pre until `end`, resuming
// with Last-Event-ID when the stream breaks off (an api restart), and
// resolves with the attempt's final state.
async function follow(url, pre, signal) {
  let state = '';
  let lastId = '';
  const onEvent = (ev) => {
    if (ev.id) lastId = ev.id;
    if (ev.event === 'end') { state = ev.data; return; }
    if (ev.event !== 'stdout' && ev.event !== 'stderr') return;
    const s = document.createElement('span');
    s.className = ev.event;
    s.textContent = ev.data;
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.appendChild(s);
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };
  while (!state && !signal.aborted) {
    let status = 0;
    try {
      status = await stream(url, onEvent, {signal, lastEventId: lastId});
    } catch (e) {
      if (signal.aborted) break;
    }
    if (status && status !== 200) {
      pre.textContent = `(logs unavailable: HTTP ${status})`;
      break;
    }
    if (!state) await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
  }
  return state;
}
