// aborts.js: aborts and attempt kills the abort reconciler gave up on after
// its maximum delivery attempts (GET /v1/aborts?state=needs_intervention):
// processes that may still run and need an operator. Other states on demand.

import {getJSON} from './api.js';
import {base, enc, esc, fmtTime, showError} from './dom.js';
import {watch} from './live.js';

export function mount(view) {
  view.innerHTML = `<div class="toolbar"><h2 style="margin:0">Aborts</h2>
    <select id="aborts-state"><option value="needs_intervention">needing manual intervention</option>
    <option value="pending">being delivered</option><option value="delivered">delivered</option><option value="">all</option></select></div>
    <table><thead><tr><th>kind</th><th>run / action</th><th>attempt</th><th>cause</th><th>reason</th><th>delivery attempts</th><th>outcome</th><th>updated</th></tr></thead>
    <tbody id="aborts"></tbody></table>`;
  const sel = view.querySelector('#aborts-state');
  const load = async () => {
    const q = sel.value ? `?state=${enc(sel.value)}` : '';
    try {
      const list = await getJSON(`/v1/aborts${q}`);
      view.querySelector('#aborts').innerHTML = list.aborts.map(row).join('') || '<tr><td colspan="8" class="muted">None.</td></tr>';
    } catch (e) { showError(e); }
  };
  sel.onchange = load;
  load();
  return watch(`${base()}/events`, load);
}

function row(a) {
  return `<tr><td>${esc(a.kind)}</td><td><span class="muted">${esc(a.project)}/${esc(a.domain)}/</span>${esc(a.run)}/${esc(a.action)}</td>
    <td>${a.attempt_id ?? ''}</td><td>${esc(a.cause)}</td><td>${esc(a.reason || '')}</td><td>${a.attempt_count}</td>
    <td>${a.outcome === 'needs_intervention' ? '<b>manual intervention may be required</b>' : esc(a.outcome || 'delivering')}</td>
    <td class="muted">${fmtTime(a.updated_at)}</td></tr>`;
}
