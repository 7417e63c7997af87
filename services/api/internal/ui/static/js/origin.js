// origin.js: where a run comes from and what it was given: the template and
// version it runs, the schedule and scheduled time or the trigger and event
// that started it, and its params; and the shared renderings of a
// template's params.

import {enc, esc, fmtTime} from './dom.js';

// workflowHref is the template page of ref {name, version?}.
export const workflowHref = (ref) => `#/workflows/${enc(ref.name)}${ref.version ? '/versions/' + enc(ref.version) : ''}`;

// workflowLink renders ref as a link: "hello version 2", "hello (latest)".
export const workflowLink = (ref) =>
  `<a href="${workflowHref(ref)}">${esc(ref.name)}</a> ${ref.version ? 'version ' + esc(ref.version) : '<span class="muted">(latest)</span>'}`;

// originHTML says where run comes from, one clause per origin: "workflow
// hello version 2 · schedule nightly for <time> · trigger t for event e";
// "inline spec" for a run of a spec given with it.
export function originHTML(run) {
  const parts = [];
  if (run.workflow) parts.push(`<span data-origin="workflow">workflow ${workflowLink(run.workflow)}</span>`);
  if (run.schedule) {
    parts.push(`<span data-origin="schedule">schedule <a href="#/schedules/${enc(run.schedule)}">${esc(run.schedule)}</a>` +
      `${run.scheduled_at ? ' for ' + esc(fmtTime(run.scheduled_at)) : ''}</span>`);
  }
  if (run.trigger) {
    parts.push(`<span data-origin="trigger">trigger ${esc(run.trigger)}${run.event_id ? ` for event <code>${esc(run.event_id)}</code>` : ''}</span>`);
  }
  return parts.length ? parts.join(' · ') : '<span class="muted" data-origin="spec">inline spec</span>';
}

// originShort is originHTML in a few words for a list: "hello v2",
// "schedule nightly", "trigger t".
export function originShort(r) {
  const parts = [];
  if (r.workflow) parts.push(`<a href="${workflowHref(r.workflow)}">${esc(r.workflow.name)}</a> v${esc(r.workflow.version)}`);
  if (r.schedule) parts.push(`schedule <a href="#/schedules/${enc(r.schedule)}">${esc(r.schedule)}</a>`);
  if (r.trigger) parts.push(`trigger ${esc(r.trigger)}`);
  return parts.join(' · ');
}

// valueText is a param's JSON value as text: a string as it is, anything
// else as JSON.
export const valueText = (v) => (typeof v === 'string' ? v : JSON.stringify(v));

// paramsHTML renders a run's or a schedule's params {name: value} as
// `name=value` chips, or "none".
export function paramsHTML(values) {
  const entries = Object.entries(values || {});
  if (!entries.length) return '<span class="muted">none</span>';
  return entries.map(([k, v]) => `<code class="param" data-param="${esc(k)}">${esc(k)}=${esc(valueText(v))}</code>`).join(' ');
}

// declsHTML renders a template's declared params as chips "WHO: string*"
// (* required, = its default), or "none".
export function declsHTML(decls) {
  if (!decls?.length) return '<span class="muted">none</span>';
  return decls.map((p) => `<code class="param" data-param="${esc(p.name)}">${esc(p.name)}: ${esc(p.type || 'string')}` +
    `${p.required ? '*' : ''}${p.default !== undefined ? ' = ' + esc(valueText(p.default)) : ''}</code>`).join(' ');
}
