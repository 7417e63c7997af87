// workers.js: the registered workers: resources and free capacity, labels,
// heartbeat age, state, draining, and the failures map with placeable_after
// (ARC's failure backoff). Workers have no event stream: the page re-fetches
// every 2 s, which also ages the heartbeats.

import {getJSON} from './api.js';
import {badge, esc, fmtDuration, fmtTime, showError} from './dom.js';
import {every} from './live.js';

const GiB = 1024 ** 3;
const cpu = (m) => (m == null ? '—' : `${(m / 1000).toFixed(m % 1000 ? 1 : 0)}`);
const mem = (b) => (b == null ? '—' : `${(b / GiB).toFixed(1)} GiB`);

export function mount(view) {
  view.innerHTML = `<h2>Workers</h2><table><thead><tr><th>worker</th><th>state</th><th>slots free/total</th>
    <th>CPU free/total</th><th>memory free/total</th><th>labels</th><th>heartbeat</th><th>failures</th></tr></thead>
    <tbody id="workers"></tbody></table>`;
  const load = async () => {
    try {
      const list = await getJSON('/v1/workers');
      view.querySelector('#workers').innerHTML = list.workers.map(row).join('') || '<tr><td colspan="8" class="muted">No workers.</td></tr>';
    } catch (e) { showError(e); }
  };
  load();
  return every(2000, load);
}

function row(w) {
  const r = w.resources || {};
  const f = w.free_resources || {};
  const labels = Object.entries(w.labels || {}).map(([k, v]) => `<div class="kv"><code>${esc(k)}=${esc(v)}</code></div>`).join('');
  const fails = Object.entries(w.failures || {}).map(([id, at]) => `<div class="kv">attempt ${esc(id)} at ${fmtTime(at)}</div>`).join('');
  const placeable = w.placeable_after && Date.parse(w.placeable_after) > Date.now() ? `<div class="kv"><b>no new work before ${fmtTime(w.placeable_after)}</b></div>` : '';
  const state = w.state === 'alive' ? 'running' : w.state === 'dead' ? 'failed' : 'pending';
  return `<tr data-worker="${esc(w.id)}"><td>${esc(w.name)}<div class="muted kv">${esc(w.id)}<br>${esc(w.address)}</div></td>
    <td><span class="badge status-${state}">${esc(w.state)}</span>${w.draining ? ' <span class="badge status-paused">draining</span>' : ''}</td>
    <td>${w.free_slots ?? '—'}/${w.slots}</td><td>${cpu(f.cpu_millis)}/${cpu(r.cpu_millis)}</td><td>${mem(f.memory_bytes)}/${mem(r.memory_bytes)}</td>
    <td>${labels}</td><td>${fmtDuration(Date.now() - Date.parse(w.last_heartbeat_at))} ago</td><td>${fails || '<span class="muted">none</span>'}${placeable}</td></tr>`;
}
