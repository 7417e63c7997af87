// schedules.js: the schedules by name: the template each runs, its cron or
// interval, overlap policy, whether it is paused, its next time and its
// latest run. Kept current by the project's event stream (a schedule's runs
// change there) and a re-fetch every 5 s (the next times move on).

import {getJSON} from './api.js';
import {badge, base, enc, esc, fmtTime, showError} from './dom.js';
import {every, watch} from './live.js';
import {workflowLink} from './origin.js';

const PAGE = 100;

export function mount(view) {
  view.innerHTML = `<div class="toolbar"><h2 style="margin:0">Schedules</h2>
      <button id="schedules-first">First</button><button id="schedules-next">Next →</button></div>
    <table><thead><tr><th>schedule</th><th>workflow</th><th>when</th><th>overlap</th><th>state</th><th>next run</th><th>latest run</th></tr></thead>
    <tbody id="schedules"></tbody></table>`;
  const st = {cursors: [''], page: 0, list: null};
  const q = (id) => view.querySelector('#' + id);
  const load = async () => {
    const params = new URLSearchParams({limit: PAGE});
    if (st.cursors[st.page]) params.set('cursor', st.cursors[st.page]);
    try {
      st.list = await getJSON(`${base()}/schedules?${params}`);
      q('schedules').innerHTML = st.list.schedules.map(row).join('') || '<tr><td colspan="7" class="muted">No schedules.</td></tr>';
      q('schedules-next').disabled = !st.list.next_cursor;
      q('schedules-first').disabled = st.page === 0;
    } catch (e) { showError(e); }
  };
  q('schedules-first').onclick = () => { st.page = 0; load(); };
  q('schedules-next').onclick = () => {
    if (!st.list?.next_cursor) return;
    st.cursors[st.page + 1] = st.list.next_cursor;
    st.page++;
    load();
  };
  load();
  const stopWatch = watch(`${base()}/events`, load);
  const stopTick = every(5000, load);
  return () => { stopWatch(); stopTick(); };
}

// when is a schedule's cron with its time zone, or its interval.
export const when = (s) => (s.cron ? `cron <code>${esc(s.cron)}</code> ${esc(s.timezone || 'UTC')}` : `every ${esc(s.interval || '')}`);

// stateBadge is "paused" or "active" as a badge.
export const stateBadge = (s) => (s.paused ? '<span class="badge status-paused">paused</span>' : '<span class="badge status-running">active</span>');

function row(s) {
  const last = s.recent_runs?.[0];
  return `<tr data-schedule="${esc(s.name)}"><td><a href="#/schedules/${enc(s.name)}">${esc(s.name)}</a></td>
    <td>${workflowLink(s.workflow)}</td><td>${when(s)}</td><td>${esc(s.overlap)}</td><td>${stateBadge(s)}</td>
    <td class="muted">${s.next_run_times.length ? fmtTime(s.next_run_times[0]) : '—'}</td>
    <td>${last ? `<a href="#/runs/${enc(last.name)}">${esc(last.name)}</a> ${badge(last.phase)}` : '<span class="muted">none yet</span>'}</td></tr>`;
}
