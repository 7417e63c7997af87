// runs.js: the runs list: newest first, filtered by phase and by a text
// search on the name (the API's name_contains), cursor paging, kept live by
// the project's event stream.

import {getJSON} from './api.js';
import {base, badge, enc, esc, fmtTime, span, showError} from './dom.js';
import {watch, every} from './live.js';
import {originShort} from './origin.js';

const PHASES = ['QUEUED', 'WAITING_FOR_RESOURCES', 'WAITING_FOR_CACHE', 'RUNNING', 'WAITING', 'PAUSED', 'SUCCEEDED',
  'FAILED', 'ABORTED', 'TIMED_OUT', 'UNSCHEDULABLE', 'WORKER_FAILED', 'SKIPPED'];
const PAGE = 50;

export function mount(view) {
  view.innerHTML = `<div class="toolbar">
      <h2 style="margin:0">Runs</h2>
      <select id="runs-phase"><option value="">any phase</option>${PHASES.map((p) => `<option>${p}</option>`).join('')}</select>
      <input id="runs-search" type="search" placeholder="search run names" size="24">
      <button id="runs-first">Newest</button><button id="runs-next">Older →</button>
      <span id="runs-page" class="muted"></span>
    </div>
    <table><thead><tr><th>run</th><th>phase</th><th>origin</th><th>started</th><th>duration</th></tr></thead><tbody id="runs"></tbody></table>`;
  const st = {cursors: [''], page: 0, list: null};
  const q = (id) => view.querySelector('#' + id);

  const load = async () => {
    const phase = q('runs-phase').value;
    const params = new URLSearchParams({limit: PAGE});
    if (phase) params.set('phase', phase);
    const needle = q('runs-search').value.trim().toLowerCase();
    if (needle) params.set('name_contains', needle);
    if (st.cursors[st.page]) params.set('cursor', st.cursors[st.page]);
    try {
      st.list = await getJSON(`${base()}/runs?${params}`);
      showError(null);
      draw();
    } catch (e) { showError(e); }
  };
  const draw = () => {
    if (!st.list) return;
    q('runs').innerHTML = st.list.runs.map(row).join('') || '<tr><td colspan="5" class="muted">No runs.</td></tr>';
    q('runs-next').disabled = !st.list.next_cursor;
    q('runs-first').disabled = st.page === 0;
    q('runs-page').textContent = `page ${st.page + 1}`;
  };
  const restart = () => { st.cursors = ['']; st.page = 0; load(); };
  let typing = 0;
  q('runs-phase').onchange = restart;
  q('runs-search').oninput = () => { clearTimeout(typing); typing = setTimeout(restart, 250); };
  q('runs-first').onclick = () => { st.page = 0; load(); };
  q('runs-next').onclick = () => {
    if (!st.list?.next_cursor) return;
    st.cursors[st.page + 1] = st.list.next_cursor;
    st.page++;
    load();
  };
  load();
  const stopWatch = watch(`${base()}/events`, load);
  const stopTick = every(1000, async () => draw()); // running durations
  return () => { stopWatch(); stopTick(); };
}

function row(r) {
  return `<tr data-run="${esc(r.name)}"><td><a href="#/runs/${enc(r.name)}">${esc(r.name)}</a></td>
    <td>${badge(r.phase)}</td><td class="run-origin">${originShort(r)}</td><td class="muted">${fmtTime(r.created_at)}</td><td>${span(r.created_at, r.ended_at)}</td></tr>`;
}
