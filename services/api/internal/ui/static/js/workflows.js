// workflows.js: the workflow templates, the latest version of each, with
// their declared params, by name with cursor paging (the URL's cursor and
// page). Templates have no event stream: the page re-fetches every 5 s.

import {getJSON} from './api.js';
import {base, enc, html, nothing, pager, render, repeat, showError, time} from './dom.js';
import {every} from './live.js';
import {decls} from './origin.js';
import {onPrefs} from './prefs.js';
import {href, param, setParams} from './url.js';

const PAGE = 100;

export function mount(view) {
  const st = {cursor: param('cursor'), page: Math.max(+param('page', '1') - 1, 0) || 0, list: null};
  const load = async () => {
    const params = new URLSearchParams({limit: PAGE});
    if (st.cursor) params.set('cursor', st.cursor);
    try {
      st.list = await getJSON(`${base()}/workflows?${params}`);
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
  const draw = () => render(html`<div class="toolbar"><h2>Workflows</h2>
      ${pager('workflows', {page: st.page, hasNext: !!st.list?.next_cursor, first, next, firstLabel: 'First', nextLabel: 'Next →'})}</div>
    <table><thead><tr><th scope="col">template</th><th scope="col">latest version</th><th scope="col">params</th><th scope="col">description</th>
      <th scope="col">created</th><th scope="col"><span class="sr-only">start</span></th></tr></thead>
    <tbody id="workflows">${!st.list ? nothing : st.list.workflows.length ? repeat(st.list.workflows, (t) => t.name, row)
      : html`<tr><td colspan="6" class="muted">No templates.</td></tr>`}</tbody></table>`, view);
  draw();
  load();
  const stop = every(5000, load);
  const stopPrefs = onPrefs(draw);
  return () => { stop(); stopPrefs(); };
}

const row = (t) => html`<tr data-workflow=${t.name}><td><a href="#/workflows/${enc(t.name)}">${t.name}</a></td>
    <td><a href="#/workflows/${enc(t.name)}/versions/${t.version}">${t.version}</a></td>
    <td class="workflow-params">${decls(t.params)}</td><td>${t.description}</td><td class="muted">${time(t.created_at)}</td>
    <td><a class="button" href=${href('#/new', {workflow: t.name})} aria-label="start a run of ${t.name}">Run…</a></td></tr>`;
