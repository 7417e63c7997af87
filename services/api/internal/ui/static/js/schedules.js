// schedules.js: the schedules by name: the template each runs, its cron or
// interval, overlap policy, whether it is paused, its next time and its
// latest run. Kept current by the project's event stream (a schedule's runs
// change there) and a re-fetch every 5 s (the next times move on).

import {getJSON} from './api.js';
import {badge, base, enc, html, nothing, pager, render, repeat, showError, time} from './dom.js';
import {every, watch} from './live.js';
import {workflowLink} from './origin.js';
import {onPrefs} from './prefs.js';
import {param, setParams} from './url.js';

const PAGE = 100;

export function mount(view) {
  const st = {cursor: param('cursor'), page: Math.max(+param('page', '1') - 1, 0) || 0, list: null};
  const load = async () => {
    const params = new URLSearchParams({limit: PAGE});
    if (st.cursor) params.set('cursor', st.cursor);
    try {
      st.list = await getJSON(`${base()}/schedules?${params}`);
      draw();
    } catch (e) { showError(e); }
  };
  const first = () => { st.page = 0; st.cursor = ''; setParams({cursor: '', page: ''}, {push: true}); load(); };
  const next = () => {
    if (!st.list?.next_cursor) return;
    st.page++;
    st.cursor = st.list.next_cursor;
    setParams({cursor: st.cursor, page: st.page + 1}, {push: true});
    load();
  };
  const draw = () => render(html`<div class="toolbar"><h2>Schedules</h2>
      ${pager('schedules', {page: st.page, hasNext: !!st.list?.next_cursor, first, next, firstLabel: 'First', nextLabel: 'Next →'})}</div>
    <table><thead><tr><th scope="col">schedule</th><th scope="col">workflow</th><th scope="col">when</th><th scope="col">overlap</th><th scope="col">state</th>
      <th scope="col">next run</th><th scope="col">latest run</th></tr></thead>
    <tbody id="schedules">${!st.list ? nothing : st.list.schedules.length ? repeat(st.list.schedules, (s) => s.name, row)
      : html`<tr><td colspan="7" class="muted">No schedules.</td></tr>`}</tbody></table>`, view);
  draw();
  load();
  const stopWatch = watch(`${base()}/events?start=now`, load);
  const stopTick = every(5000, load);
  const stopPrefs = onPrefs(draw);
  return () => { stopWatch(); stopTick(); stopPrefs(); };
}

// when is a schedule's cron with its time zone, or its interval.
export const when = (s) => (s.cron ? html`cron <code>${s.cron}</code> ${s.timezone || 'UTC'}` : html`every ${s.interval || ''}`);

// stateBadge is "paused" or "active" as a badge.
export const stateBadge = (s) => (s.paused ? html`<span class="badge status-paused">paused</span>` : html`<span class="badge status-running">active</span>`);

function row(s) {
  const last = s.recent_runs?.[0];
  return html`<tr data-schedule=${s.name}><td><a href="#/schedules/${enc(s.name)}">${s.name}</a></td>
    <td>${workflowLink(s.workflow)}</td><td>${when(s)}</td><td>${s.overlap}</td><td>${stateBadge(s)}</td>
    <td class="muted">${s.next_run_times.length ? time(s.next_run_times[0]) : '—'}</td>
    <td>${last ? html`<a href="#/runs/${enc(last.name)}">${last.name}</a> ${badge(last.phase)}` : html`<span class="muted">none yet</span>`}</td></tr>`;
}
