// concurrency.js: the slot ledger of the project/domain: each concurrency
// key a run (or a step's task) holds or waits for, its holders (a stopping
// one is an aborted run whose processes may still run) and its first
// waiters in line. A key no one holds or waits for is absent. The page
// re-fetches every 2 s.

import {getJSON} from './api.js';
import {badge, base, enc, esc, fmtTime, showError} from './dom.js';
import {every} from './live.js';

export function mount(view) {
  view.innerHTML = `<h2>Concurrency</h2><table><thead><tr><th>kind</th><th>key</th><th>held</th><th>holders</th>
    <th>waiting</th><th>next in line</th></tr></thead><tbody id="keys"></tbody></table>`;
  const load = async () => {
    try {
      const ledger = await getJSON(`${base()}/concurrency`);
      view.querySelector('#keys').innerHTML = ledger.keys.map(row).join('') ||
        '<tr><td colspan="6" class="muted">No key is held or waited for.</td></tr>';
    } catch (e) { showError(e); }
  };
  load();
  return every(2000, load);
}

const who = (s) => {
  const name = s.action ? `${s.run}/${s.action}${s.task != null ? `[${s.task}]` : ''}` : s.run;
  return `<a href="#/runs/${enc(s.run)}">${esc(name)}</a>`;
};

function row(k) {
  const holders = k.holders.map((h) => `<div class="kv">${who(h)} ${h.phase ? badge(h.phase) : ''}${h.state ? badge(h.state) : ''}` +
    `${h.stopping ? ' <span class="badge status-paused">stopping</span>' : ''} <span class="muted">since ${fmtTime(h.since)}</span></div>`).join('');
  const next = k.waiters.slice(0, 5).map((w) => `<div class="kv">${w.place ?? ''}. ${who(w)}</div>`).join('');
  return `<tr data-key="${esc(k.key)}"><td>${esc(k.kind)}</td><td><code>${esc(JSON.stringify(k.key))}</code></td>
    <td>${k.holders.length}/${k.max}</td><td>${holders || '<span class="muted">none</span>'}</td><td>${k.waiting}</td>
    <td>${next || '<span class="muted">none</span>'}</td></tr>`;
}
