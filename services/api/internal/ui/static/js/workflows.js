// workflows.js: the workflow templates, the latest version of each, with
// their declared params, by name with cursor paging. Templates have no
// event stream: the page re-fetches every 5 s.

import {getJSON} from './api.js';
import {base, enc, esc, fmtTime, showError} from './dom.js';
import {every} from './live.js';
import {declsHTML} from './origin.js';

const PAGE = 100;

export function mount(view) {
  view.innerHTML = `<div class="toolbar"><h2 style="margin:0">Workflows</h2>
      <button id="workflows-first">First</button><button id="workflows-next">Next →</button></div>
    <table><thead><tr><th>template</th><th>latest version</th><th>params</th><th>description</th><th>created</th></tr></thead>
    <tbody id="workflows"></tbody></table>`;
  const st = {cursors: [''], page: 0, list: null};
  const q = (id) => view.querySelector('#' + id);
  const load = async () => {
    const params = new URLSearchParams({limit: PAGE});
    if (st.cursors[st.page]) params.set('cursor', st.cursors[st.page]);
    try {
      st.list = await getJSON(`${base()}/workflows?${params}`);
      q('workflows').innerHTML = st.list.workflows.map(row).join('') || '<tr><td colspan="5" class="muted">No templates.</td></tr>';
      q('workflows-next').disabled = !st.list.next_cursor;
      q('workflows-first').disabled = st.page === 0;
    } catch (e) { showError(e); }
  };
  q('workflows-first').onclick = () => { st.page = 0; load(); };
  q('workflows-next').onclick = () => {
    if (!st.list?.next_cursor) return;
    st.cursors[st.page + 1] = st.list.next_cursor;
    st.page++;
    load();
  };
  load();
  return every(5000, load);
}

function row(t) {
  return `<tr data-workflow="${esc(t.name)}"><td><a href="#/workflows/${enc(t.name)}">${esc(t.name)}</a></td>
    <td><a href="#/workflows/${enc(t.name)}/versions/${t.version}">${t.version}</a></td>
    <td class="workflow-params">${declsHTML(t.params)}</td><td>${esc(t.description)}</td><td class="muted">${fmtTime(t.created_at)}</td></tr>`;
}
