// dom.js: rendering helpers shared by the pages. Pages draw with lit-html
// (vendored): render(template, view) updates in place what changed since
// the last render of the same template, so a live page never replaces the
// element that has the focus, the text being typed, or a scroll position.
// Lists are keyed (repeat) so that a row stays the same element while the
// list around it changes.

import {html, svg, render, nothing} from '../vendor/lit-html/lit-html.js';
import {repeat} from '../vendor/lit-html/directives/repeat.js';
import {timeMode} from './prefs.js';
import {urlScope} from './url.js';

export {html, svg, render, nothing, repeat};

export const $ = (id) => document.getElementById(id);
export const enc = encodeURIComponent;

// stateName is Iris's display name of a state or phase: lower case, e.g.
// RUNNING → running, WORKER_FAILED → worker_failed.
export const stateName = (s) => String(s || 'unspecified').toLowerCase();

// badge renders a state or phase as a coloured badge: the colour is the
// CSS class status-{name} (one CSS line a state), so a new phase needs
// only its line in style.css (grey until then).
export const badge = (s) => html`<span class="badge status-${stateName(s)}" data-state=${s || ''}>${stateName(s)}</span>`;

// TERMINAL are the workflow phases an action or run never leaves (but by restart).
export const TERMINAL = ['SUCCEEDED', 'FAILED', 'ABORTED', 'TIMED_OUT', 'UNSCHEDULABLE', 'WORKER_FAILED', 'SKIPPED'];
export const isTerminal = (phase) => TERMINAL.includes(phase);

const pad = (n, w = 2) => String(n).padStart(w, '0');

// utcText is t as "2024-05-06 07:08:09 UTC".
export function utcText(t) {
  const d = new Date(t);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} UTC`;
}

// relativeText is t from now: "12s ago", "in 3m4s", "now".
export function relativeText(t, now = Date.now()) {
  const ms = Date.parse(t) - now;
  if (Math.abs(ms) < 1000) return 'now';
  return ms < 0 ? `${fmtDuration(-ms)} ago` : `in ${fmtDuration(ms)}`;
}

// fmtTime formats a time as the header's times select says: local, UTC or
// relative; '' for none.
export function fmtTime(t) {
  if (!t) return '';
  if (timeMode === 'utc') return utcText(t);
  if (timeMode === 'relative') return relativeText(t);
  return new Date(t).toLocaleString();
}

// time renders t as a <time> element in the chosen form, with the exact
// time (UTC and local) as its tooltip; nothing for none.
export const time = (t) => (t ? html`<time datetime=${t} title=${`${utcText(t)} · ${new Date(t).toLocaleString()}`}>${fmtTime(t)}</time>` : nothing);

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

// scope is the project and domain of the page: the URL's (app.js writes
// them there on load and on change).
export function scope() {
  const s = urlScope();
  return {project: s.project || 'demo', domain: s.domain || 'dev'};
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

// confirmDialog asks the question in the confirmation dialog; extra is a
// template of fields (a comment, a step). It resolves with the dialog's form
// element when confirmed, null when cancelled.
export function confirmDialog(question, extra = nothing) {
  const dlg = $('confirm');
  $('confirm-text').textContent = question;
  render(extra, $('confirm-extra'));
  dlg.returnValue = '';
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'ok' ? dlg.querySelector('form') : null), {once: true});
    dlg.showModal();
  });
}

// act confirms, then runs run(form); a refusal shows the API's detail.
export async function act(question, extra, run) {
  const form = await confirmDialog(question, extra);
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

// pager is a list's "Newest / Older →" controls: first and next are called
// on click, hasNext enables Older, page (from 0) is shown.
export const pager = (id, {page, hasNext, first, next, firstLabel = 'Newest', nextLabel = 'Older →'}) => html`
  <button id="${id}-first" ?disabled=${page === 0} @click=${first}>${firstLabel}</button>
  <button id="${id}-next" ?disabled=${!hasNext} @click=${next}>${nextLabel}</button>
  <span id="${id}-page" class="muted">page ${page + 1}</span>`;
