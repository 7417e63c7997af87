// schedule.js: one schedule: the template and params it runs, its cron or
// interval, its next run times, its recent runs (linking to them), the
// counters of times it missed or skipped, and the pause, unpause and
// trigger controls, each behind a confirmation that shows the API's
// refusal.

import {getJSON, postJSON} from './api.js';
import {act, badge, base, enc, esc, fmtTime, showError} from './dom.js';
import {every, watch} from './live.js';
import {paramsHTML, workflowLink} from './origin.js';
import {stateBadge, when} from './schedules.js';

const OVERLAPS = ['skip', 'buffer_one', 'buffer_all', 'cancel_other', 'allow_all'];

export function mount(view, {schedule: name}) {
  const path = `${base()}/schedules/${enc(name)}`;
  view.innerHTML = `<p><a href="#/schedules">← schedules</a></p>
    <h2 id="schedule-title"></h2><p id="schedule-meta"></p>
    <p class="controls" id="schedule-controls"></p>
    <p id="schedule-counters" class="kv"></p>
    <h3>Next run times</h3><ol id="schedule-next"></ol><p id="schedule-next-none" class="muted" hidden></p>
    <h3>Recent runs</h3><table><thead><tr><th>run</th><th>scheduled at</th><th>phase</th></tr></thead>
    <tbody id="schedule-runs"></tbody></table>`;
  let sched = null;
  const load = async () => {
    try {
      sched = await getJSON(path);
      draw(view, sched);
    } catch (e) { showError(e); }
  };
  view.addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-op]');
    if (b && sched) control(path, sched, b.dataset.op).then((done) => done && load());
  });
  load();
  const stopWatch = watch(`${base()}/events`, load); // the schedule's runs
  const stopTick = every(5000, load); // the next times move on
  return () => { stopWatch(); stopTick(); };
}

function draw(view, s) {
  const q = (id) => view.querySelector('#' + id);
  q('schedule-title').innerHTML = `${esc(s.name)} <span id="schedule-state" data-paused="${s.paused}">${stateBadge(s)}</span>`;
  q('schedule-meta').innerHTML = `runs workflow ${workflowLink(s.workflow)} · ${when(s)}${s.jitter ? ' · jitter ' + esc(s.jitter) : ''}` +
    ` · overlap ${esc(s.overlap)} · catch-up window ${esc(s.catchup_window)}<br>params ${paramsHTML(s.params)}`;
  q('schedule-controls').innerHTML = (s.paused ? '<button data-op="unpause" class="primary">Unpause</button>' : '<button data-op="pause">Pause</button>') +
    '<button data-op="trigger">Trigger now…</button>';
  q('schedule-counters').innerHTML = [['missed_catchup_window', 'missed (older than the catch-up window)'],
    ['skipped_overlap', 'skipped (overlap policy)'], ['buffered', 'buffered']]
    .map(([k, label]) => `<span data-counter="${k}">${label}: <b>${s[k] ?? 0}</b></span>`).join(' · ');
  q('schedule-next').innerHTML = s.next_run_times.map((t) => `<li>${esc(fmtTime(t))} <span class="muted">${esc(t)}</span></li>`).join('');
  q('schedule-next-none').hidden = s.next_run_times.length > 0;
  q('schedule-next-none').textContent = s.paused ? 'None while paused.' : 'None.';
  q('schedule-runs').innerHTML = s.recent_runs.map((r) => `<tr data-run="${esc(r.name)}"><td><a href="#/runs/${enc(r.name)}">${esc(r.name)}</a></td>
    <td class="muted">${fmtTime(r.scheduled_at)}</td><td>${badge(r.phase)}</td></tr>`).join('') ||
    '<tr><td colspan="3" class="muted">No runs yet.</td></tr>';
}

// control confirms and sends pause, unpause or trigger; it resolves true
// when sent.
function control(path, s, op) {
  switch (op) {
    case 'pause':
      return act(`Pause schedule ${s.name}? The times while paused are not caught up.`, '', () => postJSON(`${path}/pause`));
    case 'unpause':
      return act(`Unpause schedule ${s.name}? It starts runs again from its next time.`, '', () => postJSON(`${path}/unpause`));
    case 'trigger': {
      const opts = [`<option value="">the schedule's (${esc(s.overlap)})</option>`, ...OVERLAPS.map((o) => `<option>${o}</option>`)].join('');
      return act(`Start a run of schedule ${s.name} now?`, `<label>Overlap policy<br><select name="overlap" id="confirm-overlap">${opts}</select></label>`,
        (form) => postJSON(`${path}/trigger`, form.overlap.value ? {overlap: form.overlap.value} : {}));
    }
  }
  return Promise.resolve(false);
}
