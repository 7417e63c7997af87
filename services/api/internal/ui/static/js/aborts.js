// aborts.js: the aborts and attempt kills of the project/domain: by
// default those the abort reconciler gave up on after its maximum delivery
// attempts (GET /v1/aborts?state=needs_intervention&project=&domain=):
// processes that may still run and need an operator. Other states on
// demand; the state and the page are the URL's (state, cursor, page).
// Kept current by the project/domain's event stream.

import {getJSON} from './api.js';
import {base, enc, html, nothing, pager, render, repeat, scope, showError, time} from './dom.js';
import {watch} from './live.js';
import {onPrefs} from './prefs.js';
import {param, setParams} from './url.js';

const STATES = [['needs_intervention', 'needing manual intervention'], ['pending', 'being delivered'], ['delivered', 'delivered'], ['all', 'all']];

export function mount(view) {
  const st = {state: STATES.some(([s]) => s === param('state')) ? param('state') : 'needs_intervention',
    cursor: param('cursor'), page: Math.max(+param('page', '1') - 1, 0) || 0, list: null};
  let left = false;
  const query = () => {
    const {project, domain} = scope();
    const q = new URLSearchParams({project, domain});
    if (st.state !== 'all') q.set('state', st.state);
    if (st.cursor) q.set('cursor', st.cursor);
    return q.toString();
  };
  const load = async () => {
    const asked = query();
    try {
      const list = await getJSON(`/v1/aborts?${asked}`);
      if (left || asked !== query()) return;
      st.list = list;
      draw();
    } catch (e) { showError(e); }
  };
  const setState = (s) => {
    st.state = s;
    st.cursor = '';
    st.page = 0;
    setParams({state: s === 'needs_intervention' ? '' : s, cursor: '', page: ''});
    load();
  };
  const first = () => { st.page = 0; st.cursor = ''; setParams({cursor: '', page: ''}, {push: true}); load(); };
  const next = () => {
    if (!st.list?.next_cursor) return;
    st.page++;
    st.cursor = st.list.next_cursor;
    setParams({cursor: st.cursor, page: st.page + 1}, {push: true});
    load();
  };
  const draw = () => render(html`<div class="toolbar"><h2>Aborts</h2>
    <label>state <select id="aborts-state" @change=${(ev) => setState(ev.target.value)}>
      ${STATES.map(([s, label]) => html`<option value=${s} ?selected=${s === st.state}>${label}</option>`)}</select></label>
    ${pager('aborts', {page: st.page, hasNext: !!st.list?.next_cursor, first, next, firstLabel: 'Latest'})}
    <span class="muted">in ${scope().project}/${scope().domain}</span></div>
    <table><thead><tr><th scope="col">kind</th><th scope="col">run / action</th><th scope="col">attempt</th><th scope="col">cause</th><th scope="col">reason</th>
      <th scope="col">delivery attempts</th><th scope="col">outcome</th><th scope="col">updated</th></tr></thead>
    <tbody id="aborts">${!st.list ? nothing : st.list.aborts.length ? repeat(st.list.aborts, (a) => `${a.kind}/${a.run}/${a.action}/${a.attempt_id ?? ''}`, row)
      : html`<tr><td colspan="8" class="muted">None.</td></tr>`}</tbody></table>`, view);
  draw();
  load();
  const stopWatch = watch(`${base()}/events?start=now`, load);
  const stopPrefs = onPrefs(draw);
  return () => { left = true; stopWatch(); stopPrefs(); };
}

const row = (a) => html`<tr data-run=${a.run} data-action=${a.action}><td>${a.kind}</td>
    <td><a href="#/runs/${enc(a.run)}/actions/${enc(a.action)}">${a.run}/${a.action}</a></td>
    <td>${a.attempt_id ?? ''}</td><td>${a.cause}</td><td>${a.reason || ''}</td><td>${a.attempt_count}</td>
    <td>${a.outcome === 'needs_intervention' ? html`<b>manual intervention may be required</b>` : a.outcome || 'delivering'}</td>
    <td class="muted">${time(a.updated_at)}</td></tr>`;
