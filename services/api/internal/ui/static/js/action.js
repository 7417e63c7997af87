// action.js: one action: its tasks counted by state, and a page of its
// tasks (previous/next through the API's cursor, so that a step of 10,000
// tasks renders a page at a time) with their attempt history, each attempt
// with its Iris badge, "(worker failure)" on worker-failure attempts, the
// pending_reason under a PENDING task's badge, each attempt's cause and error
// code; and the logs of any task's attempt (its logs button, or a task and
// attempt number typed in), followed live while it runs, with timestamps,
// ANSI colours, a search and a download. The attempt shown and the search
// are the URL's (task, attempt, gen, q): a link to a log line's page.

import {getJSON, postJSON} from './api.js';
import {act, badge, base, enc, html, isTerminal, nothing, render, repeat, showError, span, time} from './dom.js';
import {watch} from './live.js';
import {LogView, download, follow} from './logs.js';
import {onPrefs} from './prefs.js';
import {param, setParams} from './url.js';

const workerFailure = (at) => at.state === 'WORKER_FAILED' || at.cause === 'worker_lost';

// PAGE is the API's page size (GET .../actions/{action} without limit).
const PAGE = 100;

// STAMPS remembers (localStorage) whether log lines show their times.
const STAMPS = 'capstan.logs.timestamps';
const stampsOn = () => { try { return localStorage.getItem(STAMPS) !== 'off'; } catch (e) { return true; } };
const rememberStamps = (on) => { try { localStorage.setItem(STAMPS, on ? 'on' : 'off'); } catch (e) { /* this page only */ } };

export function mount(view, {run: runName, action: name}) {
  const path = `${base()}/runs/${enc(runName)}/actions/${enc(name)}`;
  const st = {action: null, page: 0, cursors: [''], stamps: stampsOn(),
    q: param('q'), logs: {key: '', title: 'Logs', state: '', following: false}};
  const pick = param('task') !== '' && param('attempt') !== ''
    ? {task: +param('task'), attempt: +param('attempt'), gen: +param('gen', '0'), byUser: true} : null;
  let left = false; // the page was left: an answer still on its way draws nothing

  const ui = {
    prev: () => { if (st.page > 0) { st.page--; load(); } },
    next: () => { if (st.cursors[st.page + 1] !== undefined) { st.page++; load(); } },
    abort: async () => {
      if (await act(`Abort step ${name} of run ${runName}?`, nothing, () => postJSON(`${path}/abort`, {reason: 'aborted from the dashboard'}))) load();
    },
    logs: (task, attempt, gen) => logs.pick(task, attempt, gen, true),
    jump: (ev) => {
      ev.preventDefault();
      const f = ev.target;
      const task = +f.task.value;
      const attempt = +f.attempt.value || 1;
      if (Number.isInteger(task) && task >= 0 && Number.isInteger(attempt) && attempt >= 1) logs.pick(task, attempt, 0, true);
    },
    search: (ev) => { st.q = ev.target.value; setParams({q: st.q}); logs.view.search(st.q); },
    stamps: (ev) => {
      st.stamps = ev.target.checked;
      rememberStamps(st.stamps);
      draw();
    },
    download: () => {
      const {task, attempt} = logs.current();
      download(`${runName}-${name}-task${task}-attempt${attempt}.log`, logs.view.text(st.stamps));
    },
  };
  const draw = () => render(page(runName, st, ui), view);
  draw();
  const logs = logPanel(view, path, st, draw);
  logs.view.search(st.q);
  if (pick) logs.pick(pick.task, pick.attempt, pick.gen, false, true);

  const load = async () => {
    try {
      const shown = st.page;
      const cursor = st.cursors[shown];
      const a = await getJSON(cursor ? `${path}?cursor=${enc(cursor)}` : path);
      if (left || shown !== st.page) return; // left, or the user paged meanwhile
      st.action = a;
      if (a.tasks_next_cursor) st.cursors[st.page + 1] = a.tasks_next_cursor;
      else st.cursors.length = st.page + 1;
      draw();
      logs.autoPick(a);
    } catch (e) { showError(e); }
  };
  load();
  const stopWatch = watch(`${base()}/runs/${enc(runName)}/events`, load);
  const stopPrefs = onPrefs(draw);
  return () => { left = true; stopWatch(); stopPrefs(); logs.stop(); };
}

function page(runName, st, ui) {
  const a = st.action;
  const first = st.page * PAGE;
  const counts = Object.entries(a?.task_counts || {}).map(([s, n]) => html`${badge(s)} <span data-count=${s}>${n}</span> `);
  const lg = st.logs;
  return html`<p><a href="#/runs/${enc(runName)}">← run ${runName}</a></p>
    <h2 id="action-title">${runName} / ${a ? html`${a.name} ${badge(a.phase)}` : '…'}</h2>
    <p id="action-meta" class="muted">${a ? html`${a.kind} · started ${a.started_at ? time(a.started_at) : '—'} · duration ${span(a.started_at, a.ended_at) || '—'}${
      a.generation ? ` · generation ${a.generation}` : ''}${a.cache_status ? ` · cache ${a.cache_status}` : ''}${a.reason ? ` · ${a.reason}` : ''}` : nothing}</p>
    <p class="controls" id="action-controls">${a && a.started_at && !isTerminal(a.phase)
      ? html`<button data-op="abort" class="danger" @click=${ui.abort}>Abort step</button>` : nothing}</p>
    <p id="action-counts">${a?.task_count ? html`<span id="task-count">${a.task_count}</span> tasks${a.generation ? ` in generation ${a.generation}` : ''}: ${counts}` : nothing}</p>
    <div class="pager" id="tasks-pager" ?hidden=${!a || (st.page === 0 && !a.tasks_next_cursor)}>
      <button data-op="prev" id="tasks-prev" ?disabled=${st.page === 0} @click=${ui.prev}>← previous</button>
      <span id="tasks-range" class="muted">${a?.tasks.length ? `page ${st.page + 1}: tasks ${first + 1}–${first + a.tasks.length}` : ''}</span>
      <button data-op="next" id="tasks-next" ?disabled=${!a?.tasks_next_cursor} @click=${ui.next}>next →</button></div>
    <div id="tasks">${!a ? nothing : a.tasks.length ? repeat(a.tasks, (t) => `${t.generation ?? 0}/${t.index}`, (t) => taskBlock(t, lg.key, ui))
      : html`<p class="muted">No tasks (yet).</p>`}</div>
    <section class="logs-panel" aria-labelledby="logs-title">
      <h3 id="logs-title">${lg.title}</h3>
      <div class="toolbar">
        <form id="logs-pick" @submit=${ui.jump}>
          <label>task <input name="task" id="logs-task" type="number" min="0" step="1" size="6" required></label>
          <label>attempt <input name="attempt" id="logs-attempt" type="number" min="1" step="1" size="4" value="1"></label>
          <button>Show logs</button></form>
        <label>search <input id="logs-search" type="search" size="20" placeholder="lines holding…" .value=${st.q} @input=${ui.search}></label>
        <span id="logs-matches" class="muted" aria-live="polite"></span>
        <label><input id="logs-stamps" type="checkbox" .checked=${st.stamps} @change=${ui.stamps}> timestamps</label>
        <button id="logs-download" @click=${ui.download} ?disabled=${!lg.key}>Download</button>
      </div>
      <pre class="logs ${st.stamps ? 'stamped' : ''}" id="logs" role="log" tabindex="0" aria-label="log output"></pre>
    </section>`;
}

function taskBlock(t, shownKey, ui) {
  const gen = t.generation ?? 0;
  const reason = t.state === 'PENDING' && t.pending_reason ? html`<div class="pending-reason">${t.pending_reason}</div>` : nothing;
  return html`<div class="task" data-task=${t.index} data-gen=${gen}>
    <h3>task ${t.index}${gen ? html` <span class="muted">(generation ${gen})</span>` : nothing} <span class="task-state">${badge(t.state)}${reason}</span>${t.reused ? html` <span class="muted">(reused)</span>` : nothing}</h3>
    ${t.item != null ? html`<p class="kv task-item">item <code>${t.item.length > 200 ? t.item.slice(0, 200) + '…' : t.item}</code></p>` : nothing}
    <p class="muted kv">failures ${t.failure_count}/${t.max_retries_failure} · preemptions ${t.preemption_count}/${t.max_retries_preemption}${
      t.max_system_failures != null ? ` · system failures ${t.system_failure_count ?? 0}/${t.max_system_failures}` : ''}${t.worker_id ? ` · worker ${t.worker_id}` : ''}</p>
    <table><thead><tr><th scope="col">attempt</th><th scope="col">state</th><th scope="col">cause</th><th scope="col">code</th><th scope="col">exit</th>
      <th scope="col">error</th><th scope="col">started</th><th scope="col">duration</th><th scope="col"><span class="sr-only">logs</span></th></tr></thead><tbody>
    ${repeat(t.attempts, (at) => at.number, (at) => attemptRow(t, gen, at, shownKey, ui))}</tbody></table></div>`;
}

function attemptRow(t, gen, at, shownKey, ui) {
  const shown = shownKey === `${t.index}/${at.number}/${gen}`;
  return html`<tr class="attempt ${shown ? 'current' : ''}" data-task=${t.index} data-attempt=${at.number} data-state=${at.state}>
    <td>#${at.number}</td><td>${badge(at.state)}${workerFailure(at) ? html` <span class="worker-failure">(worker failure)</span>` : nothing}</td>
    <td>${at.cause || ''}</td><td>${at.code || ''}</td><td>${at.exit_code ?? ''}</td><td>${at.error || ''}</td>
    <td class="muted">${time(at.started_at || at.created_at)}</td><td>${span(at.started_at, at.finished_at)}</td>
    <td><button data-op="logs" data-task=${t.index} data-attempt=${at.number} data-gen=${gen} aria-pressed=${shown ? 'true' : 'false'}
      aria-label="logs of task ${t.index} attempt ${at.number}" @click=${() => ui.logs(t.index, at.number, gen)}>logs</button></td></tr>`;
}

// logPanel shows one attempt's output in #logs. Until the user picks an
// attempt (or the URL names one), it follows the newest attempt of the
// first task shown.
function logPanel(view, path, st, draw) {
  const pre = view.querySelector('#logs');
  const lv = new LogView(pre, () => {
    const m = view.querySelector('#logs-matches');
    if (m) m.textContent = lv.needle ? `${lv.shown} of ${lv.lines.length} lines` : '';
  });
  let ctl = null;
  let chosen = false;
  let cur = {task: 0, attempt: 0, gen: 0};
  const title = (task, attempt, state, following) =>
    `Logs: task ${task} attempt #${attempt}${following ? ' (following)' : state ? ' — ' + state : ''}`;
  const pick = (task, attempt, gen, byUser, fromURL = false) => {
    if (byUser) chosen = true;
    const k = `${task}/${attempt}/${gen}`;
    if (k === st.logs.key) return;
    if (byUser && !fromURL) setParams({task, attempt, gen: gen || ''});
    cur = {task, attempt, gen};
    if (ctl) ctl.abort();
    ctl = new AbortController();
    lv.reset();
    st.logs = {key: k, title: title(task, attempt, '', true)};
    draw();
    follow(`${path}/tasks/${task}/attempts/${attempt}/logs?follow=true&timestamps=true&generation=${gen}`, lv, ctl.signal)
      .then((state) => {
        if (st.logs.key !== k || !view.isConnected) return; // another attempt, or the page was left
        st.logs = {key: k, title: title(task, attempt, state, false)};
        draw();
      });
  };
  return {
    view: lv,
    pick,
    current: () => cur,
    autoPick(a) {
      const t = a.tasks[0];
      const at = t?.attempts[t.attempts.length - 1];
      if (!chosen && at) pick(t.index, at.number, t.generation ?? 0, false);
    },
    stop() { if (ctl) ctl.abort(); },
  };
}
