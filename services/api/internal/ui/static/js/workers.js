// workers.js: the registered workers: resources and free capacity, labels,
// heartbeat age, state, draining, and the failures map with placeable_after
// (ARC's failure backoff). Workers have no event stream: the page re-fetches
// every 2 s, which also ages the heartbeats; rows are keyed by worker id.

import {getJSON} from './api.js';
import {fmtDuration, html, nothing, render, repeat, showError, time} from './dom.js';
import {every} from './live.js';
import {onPrefs} from './prefs.js';

const GiB = 1024 ** 3;
const cpu = (m) => (m == null ? '—' : `${(m / 1000).toFixed(m % 1000 ? 1 : 0)}`);
const mem = (b) => (b == null ? '—' : `${(b / GiB).toFixed(1)} GiB`);

export function mount(view) {
  let list = null;
  const draw = () => render(html`<h2>Workers</h2><table><thead><tr><th scope="col">worker</th><th scope="col">state</th><th scope="col">slots free/total</th>
    <th scope="col">CPU free/total</th><th scope="col">memory free/total</th><th scope="col">labels</th><th scope="col">heartbeat</th><th scope="col">failures</th></tr></thead>
    <tbody id="workers">${!list ? nothing : list.workers.length ? repeat(list.workers, (w) => w.id, row)
      : html`<tr><td colspan="8" class="muted">No workers.</td></tr>`}</tbody></table>`, view);
  const load = async () => {
    try {
      list = await getJSON('/v1/workers');
      draw();
    } catch (e) { showError(e); }
  };
  draw();
  load();
  const stop = every(2000, load);
  const stopPrefs = onPrefs(draw);
  return () => { stop(); stopPrefs(); };
}

function row(w) {
  const r = w.resources || {};
  const f = w.free_resources || {};
  const labels = Object.entries(w.labels || {}).map(([k, v]) => html`<div class="kv"><code>${k}=${v}</code></div>`);
  const fails = Object.entries(w.failures || {}).map(([id, at]) => html`<div class="kv">attempt ${id} at ${time(at)}</div>`);
  const placeable = w.placeable_after && Date.parse(w.placeable_after) > Date.now()
    ? html`<div class="kv"><b>no new work before ${time(w.placeable_after)}</b></div>` : nothing;
  const state = w.state === 'alive' ? 'running' : w.state === 'dead' ? 'failed' : 'pending';
  return html`<tr data-worker=${w.id}><td>${w.name}<div class="muted kv">${w.id}<br>${w.address}</div></td>
    <td><span class="badge status-${state}">${w.state}</span>${w.draining ? html` <span class="badge status-paused">draining</span>` : nothing}</td>
    <td>${w.free_slots ?? '—'}/${w.slots}</td><td>${cpu(f.cpu_millis)}/${cpu(r.cpu_millis)}</td><td>${mem(f.memory_bytes)}/${mem(r.memory_bytes)}</td>
    <td>${labels}</td><td>${fmtDuration(Date.now() - Date.parse(w.last_heartbeat_at))} ago</td><td>${fails.length ? fails : html`<span class="muted">none</span>`}${placeable}</td></tr>`;
}
