// runs.js: the runs list: newest first, filtered by phase and by a text
// search on the name (the API's name_contains), cursor paging, kept live by
// the project's event stream. The filters and the page are the URL's
// (phase, q, page, cursor); rows are keyed by run name, so a live update
// changes their text in place and a focused run link keeps the focus.

import {getJSON} from './api.js';
import {base, badge, enc, html, pager, render, repeat, showError, span, time} from './dom.js';
import {watch, every} from './live.js';
import {originShort} from './origin.js';
import {onPrefs} from './prefs.js';
import {param, setParams} from './url.js';

const PHASES = ['QUEUED', 'WAITING_FOR_RESOURCES', 'WAITING_FOR_CACHE', 'RUNNING', 'WAITING', 'PAUSED', 'SUCCEEDED',
  'FAILED', 'ABORTED', 'TIMED_OUT', 'UNSCHEDULABLE', 'WORKER_FAILED', 'SKIPPED'];
const PAGE = 50;

export function mount(view) {
  const st = {phase: param('phase'), q: param('q'), page: Math.max(+param('page', '1') - 1, 0) || 0,
    cursor: param('cursor'), list: null};
  let left = false;

  // query is the API query of the filters and page shown.
  const query = () => {
    const p = new URLSearchParams({limit: PAGE});
    if (st.phase) p.set('phase', st.phase);
    if (st.q.trim()) p.set('name_contains', st.q.trim().toLowerCase());
    if (st.cursor) p.set('cursor', st.cursor);
    return p.toString();
  };
  const load = async () => {
    const asked = query();
    try {
      const list = await getJSON(`${base()}/runs?${asked}`);
      if (left || asked !== query()) return; // left, or the filters moved on meanwhile
      st.list = list;
      showError(null);
      draw();
    } catch (e) { showError(e); }
  };
  const restart = () => {
    st.page = 0;
    st.cursor = '';
    setParams({phase: st.phase, q: st.q.trim(), page: '', cursor: ''});
    load();
  };
  let typing = 0;
  const onSearch = (ev) => {
    st.q = ev.target.value;
    clearTimeout(typing);
    typing = setTimeout(restart, 250);
  };
  const first = () => { st.page = 0; st.cursor = ''; setParams({page: '', cursor: ''}, {push: true}); load(); };
  const next = () => {
    if (!st.list?.next_cursor) return;
    st.page++;
    st.cursor = st.list.next_cursor;
    setParams({page: st.page + 1, cursor: st.cursor}, {push: true});
    load();
  };

  const draw = () => render(html`<div class="toolbar">
      <h2>Runs</h2>
      <label>phase <select id="runs-phase" @change=${(ev) => { st.phase = ev.target.value; restart(); }}>
        <option value="" ?selected=${!st.phase}>any phase</option>
        ${PHASES.map((p) => html`<option ?selected=${p === st.phase}>${p}</option>`)}</select></label>
      <label>name <input id="runs-search" type="search" placeholder="search run names" size="24" .value=${st.q} @input=${onSearch}></label>
      ${pager('runs', {page: st.page, hasNext: !!st.list?.next_cursor, first, next})}
      <a class="button primary" href="#/new">New run</a>
    </div>
    <table><caption class="sr-only">Runs of this project and domain, newest first</caption>
      <thead><tr><th scope="col">run</th><th scope="col">phase</th><th scope="col">origin</th><th scope="col">started</th><th scope="col">duration</th></tr></thead>
      <tbody id="runs">${!st.list ? '' : st.list.runs.length ? repeat(st.list.runs, (r) => r.name, row)
        : html`<tr><td colspan="5" class="muted">No runs.</td></tr>`}</tbody></table>`, view);

  draw();
  load();
  const stopWatch = watch(`${base()}/events?start=now`, load);
  const stopTick = every(1000, async () => draw()); // running durations, relative times
  const stopPrefs = onPrefs(draw);
  return () => { left = true; clearTimeout(typing); stopWatch(); stopTick(); stopPrefs(); };
}

const row = (r) => html`<tr data-run=${r.name}><td><a href="#/runs/${enc(r.name)}">${r.name}</a></td>
    <td>${badge(r.phase)}</td><td class="run-origin">${originShort(r)}</td><td class="muted">${time(r.created_at)}</td><td>${span(r.created_at, r.ended_at)}</td></tr>`;
