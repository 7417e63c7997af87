// concurrency.js: the slot ledger of the project/domain: each concurrency
// key a run (or a step's task) holds or waits for, its holders (a stopping
// one is an aborted run whose processes may still run) and its first
// waiters in line. A key no one holds or waits for is absent. The page
// re-fetches every 2 s.

import {getJSON} from './api.js';
import {badge, base, enc, html, nothing, render, repeat, showError, time} from './dom.js';
import {every} from './live.js';
import {onPrefs} from './prefs.js';

export function mount(view) {
  let ledger = null;
  const draw = () => render(html`<h2>Concurrency</h2><table><thead><tr><th scope="col">kind</th><th scope="col">key</th><th scope="col">held</th>
    <th scope="col">holders</th><th scope="col">waiting</th><th scope="col">next in line</th></tr></thead>
    <tbody id="keys">${!ledger ? nothing : ledger.keys.length ? repeat(ledger.keys, (k) => `${k.kind}/${JSON.stringify(k.key)}`, row)
      : html`<tr><td colspan="6" class="muted">No key is held or waited for.</td></tr>`}</tbody></table>`, view);
  const load = async () => {
    try {
      ledger = await getJSON(`${base()}/concurrency`);
      draw();
    } catch (e) { showError(e); }
  };
  draw();
  load();
  const stop = every(2000, load);
  const stopPrefs = onPrefs(draw);
  return () => { stop(); stopPrefs(); };
}

const who = (s) => {
  const name = s.action ? `${s.run}/${s.action}${s.task != null ? `[${s.task}]` : ''}` : s.run;
  return html`<a href="#/runs/${enc(s.run)}">${name}</a>`;
};

function row(k) {
  const holders = k.holders.map((h) => html`<div class="kv">${who(h)} ${h.phase ? badge(h.phase) : nothing}${h.state ? badge(h.state) : nothing}${
    h.stopping ? html` <span class="badge status-paused">stopping</span>` : nothing} <span class="muted">since ${time(h.since)}</span></div>`);
  const next = k.waiters.slice(0, 5).map((w) => html`<div class="kv">${w.place ?? ''}. ${who(w)}</div>`);
  return html`<tr data-key=${k.key}><td>${k.kind}</td><td><code>${JSON.stringify(k.key)}</code></td>
    <td>${k.holders.length}/${k.max}</td><td>${holders.length ? holders : html`<span class="muted">none</span>`}</td><td>${k.waiting}</td>
    <td>${next.length ? next : html`<span class="muted">none</span>`}</td></tr>`;
}
