// schedule.js: one schedule: the template and params it runs, its cron or
// interval, its next run times, its recent runs (linking to them), the
// counters of times it missed or skipped, and the pause, unpause and
// trigger controls, each behind a confirmation that shows the API's
// refusal.

import {getJSON, postJSON} from './api.js';
import {act, badge, base, enc, html, nothing, render, repeat, showError, time, utcText} from './dom.js';
import {every, watch} from './live.js';
import {params, workflowLink} from './origin.js';
import {onPrefs} from './prefs.js';
import {stateBadge, when} from './schedules.js';

const OVERLAPS = ['skip', 'buffer_one', 'buffer_all', 'cancel_other', 'allow_all'];

export function mount(view, {schedule: name}) {
  const path = `${base()}/schedules/${enc(name)}`;
  let sched = null;
  const load = async () => {
    try {
      sched = await getJSON(path);
      draw();
    } catch (e) { showError(e); }
  };
  const on = (op) => sched && control(path, sched, op).then((done) => done && load());
  const draw = () => render(page(name, sched, on), view);
  draw();
  load();
  const stopWatch = watch(`${base()}/events?start=now`, load); // the schedule's runs
  const stopTick = every(5000, load); // the next times move on
  const stopPrefs = onPrefs(draw);
  return () => { stopWatch(); stopTick(); stopPrefs(); };
}

function page(name, s, on) {
  const back = html`<p><a href="#/schedules">← schedules</a></p>`;
  if (!s) return html`${back}<h2 id="schedule-title">${name}</h2>`;
  const counters = [['missed_catchup_window', 'missed (older than the catch-up window)'], ['skipped_overlap', 'skipped (overlap policy)'], ['buffered', 'buffered']];
  return html`${back}
    <h2 id="schedule-title">${s.name} <span id="schedule-state" data-paused=${String(s.paused)}>${stateBadge(s)}</span></h2>
    <p id="schedule-meta">runs workflow ${workflowLink(s.workflow)} · ${when(s)}${s.jitter ? ` · jitter ${s.jitter}` : ''} · overlap ${s.overlap}
      · catch-up window ${s.catchup_window}<br>params ${params(s.params)}</p>
    <p class="controls" id="schedule-controls">${s.paused
      ? html`<button data-op="unpause" class="primary" @click=${() => on('unpause')}>Unpause</button>`
      : html`<button data-op="pause" @click=${() => on('pause')}>Pause</button>`}<button data-op="trigger" @click=${() => on('trigger')}>Trigger now…</button></p>
    <p id="schedule-counters" class="kv">${counters.map(([k, label], i) => html`${i ? ' · ' : ''}<span data-counter=${k}>${label}: <b>${s[k] ?? 0}</b></span>`)}</p>
    <h3>Next run times</h3><ol id="schedule-next">${s.next_run_times.map((t) => html`<li>${time(t)} <span class="muted">${utcText(t)}</span></li>`)}</ol>
    <p id="schedule-next-none" class="muted" ?hidden=${s.next_run_times.length > 0}>${s.paused ? 'None while paused.' : 'None.'}</p>
    <h3>Recent runs</h3><table><thead><tr><th scope="col">run</th><th scope="col">scheduled at</th><th scope="col">phase</th></tr></thead>
    <tbody id="schedule-runs">${s.recent_runs.length ? repeat(s.recent_runs, (r) => r.name, (r) => html`<tr data-run=${r.name}><td><a href="#/runs/${enc(r.name)}">${r.name}</a></td>
      <td class="muted">${time(r.scheduled_at)}</td><td>${badge(r.phase)}</td></tr>`) : html`<tr><td colspan="3" class="muted">No runs yet.</td></tr>`}</tbody></table>`;
}

// control confirms and sends pause, unpause or trigger; it resolves true
// when sent.
function control(path, s, op) {
  switch (op) {
    case 'pause':
      return act(`Pause schedule ${s.name}? The times while paused are not caught up.`, nothing, () => postJSON(`${path}/pause`));
    case 'unpause':
      return act(`Unpause schedule ${s.name}? It starts runs again from its next time.`, nothing, () => postJSON(`${path}/unpause`));
    case 'trigger':
      return act(`Start a run of schedule ${s.name} now?`, html`<label>Overlap policy<br><select name="overlap" id="confirm-overlap">
          <option value="">the schedule's (${s.overlap})</option>${OVERLAPS.map((o) => html`<option>${o}</option>`)}</select></label>`,
        (form) => postJSON(`${path}/trigger`, form.overlap.value ? {overlap: form.overlap.value} : {}));
  }
  return Promise.resolve(false);
}
