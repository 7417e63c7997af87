// dom.js: small rendering helpers shared by the pages.

export const $ = (id) => document.getElementById(id);

const ENT = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
// esc escapes text for HTML.
export const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ENT[c]);
export const enc = encodeURIComponent;

// stateName is Iris's display name of a state or phase: lower case, e.g.
// RUNNING → running, WORKER_FAILED → worker_failed.
export const stateName = (s) => String(s || 'unspecified').toLowerCase();

// badge renders a state or phase as a coloured badge (CSS class status-{name}).
export const badge = (s) => `<span class="badge status-${esc(stateName(s))}" data-state="${esc(s)}">${esc(stateName(s))}</span>`;

// TERMINAL are the workflow phases an action or run never leaves (but by restart).
export const TERMINAL = ['SUCCEEDED', 'FAILED', 'ABORTED', 'TIMED_OUT', 'UNSCHEDULABLE', 'WORKER_FAILED', 'SKIPPED'];
export const isTerminal = (phase) => TERMINAL.includes(phase);

export const fmtTime = (t) => (t ? new Date(t).toLocaleString() : '');

// fmtDuration formats milliseconds as 1h2m, 3m4s, 5.6s.
export function fmtDuration(ms) {
  if (ms == null || ms < 0) return '';
  if (ms < 10000) return (ms / 1000).toFixed(1) + 's';
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60}s`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
}

// span is the duration from start to end (or now while it runs), formatted.
export const span = (start, end) => (start ? fmtDuration((end ? Date.parse(end) : Date.now()) - Date.parse(start)) : '');

// scope is the project and domain the header selects (URL, then storage, then demo/dev).
export function scope() {
  return {project: $('project').value || 'demo', domain: $('domain').value || 'dev'};
}

// base is the API path of the selected project and domain.
export const base = () => {
  const {project, domain} = scope();
  return `/v1/projects/${enc(project)}/domains/${enc(domain)}`;
};

// showError shows a refusal's detail (a ProblemError's message) above the
// page; showError(null) hides it.
export function showError(e) {
  const m = $('msg');
  if (!e) { m.hidden = true; m.textContent = ''; return; }
  m.textContent = e.status ? `${e.message} (${e.status}${e.code ? ' ' + e.code : ''})` : String(e.message || e);
  m.hidden = false;
}

// confirmDialog asks the question in the confirmation dialog; extraHTML adds
// fields (a comment, a step). It resolves with the dialog's form element when
// confirmed, null when cancelled.
export function confirmDialog(question, extraHTML = '') {
  const dlg = $('confirm');
  $('confirm-text').textContent = question;
  $('confirm-extra').innerHTML = extraHTML;
  dlg.returnValue = '';
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok' ? dlg.querySelector('form') : null), {once: true});
    dlg.showModal();
  });
}

// act confirms, then runs do(form); a refusal shows the API's detail.
export async function act(question, extraHTML, run) {
  const form = await confirmDialog(question, extraHTML);
  if (!form) return false;
  try {
    await run(form);
    showError(null);
    return true;
  } catch (e) {
    showError(e);
    return false;
  }
}
