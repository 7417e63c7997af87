// origin.js: where a run comes from and what it was given: the template and
// version it runs, the schedule and scheduled time or the trigger and event
// that started it, and its params; and the shared renderings of a
// template's params.

import {enc, html, nothing, time} from './dom.js';

// workflowHref is the template page of ref {name, version?}.
export const workflowHref = (ref) => `#/workflows/${enc(ref.name)}${ref.version ? '/versions/' + enc(ref.version) : ''}`;

// workflowLink renders ref as a link: "hello version 2", "hello (latest)".
export const workflowLink = (ref) => html`<a href=${workflowHref(ref)}>${ref.name}</a> ${ref.version ? `version ${ref.version}` : html`<span class="muted">(latest)</span>`}`;

// origin says where run comes from, one clause per origin: "workflow
// hello version 2 · schedule nightly for <time> · trigger t for event e";
// "inline spec" for a run of a spec given with it.
export function origin(run) {
  const parts = [];
  if (run.workflow) parts.push(html`<span data-origin="workflow">workflow ${workflowLink(run.workflow)}</span>`);
  if (run.schedule) {
    parts.push(html`<span data-origin="schedule">schedule <a href="#/schedules/${enc(run.schedule)}">${run.schedule}</a>${run.scheduled_at ? html` for ${time(run.scheduled_at)}` : nothing}</span>`);
  }
  if (run.trigger) {
    parts.push(html`<span data-origin="trigger">trigger ${run.trigger}${run.event_id ? html` for event <code>${run.event_id}</code>` : nothing}</span>`);
  }
  return parts.length ? joined(parts) : html`<span class="muted" data-origin="spec">inline spec</span>`;
}

// originShort is origin in a few words for a list: "hello v2",
// "schedule nightly", "trigger t".
export function originShort(r) {
  const parts = [];
  if (r.workflow) parts.push(html`<a href=${workflowHref(r.workflow)}>${r.workflow.name}</a> v${r.workflow.version}`);
  if (r.schedule) parts.push(html`schedule <a href="#/schedules/${enc(r.schedule)}">${r.schedule}</a>`);
  if (r.trigger) parts.push(html`trigger ${r.trigger}`);
  return joined(parts);
}

// joined puts " · " between templates.
export const joined = (parts, sep = ' · ') => parts.map((p, i) => (i ? html`${sep}${p}` : p));

// valueText is a param's JSON value as text: a string as it is, anything
// else as JSON.
export const valueText = (v) => (typeof v === 'string' ? v : JSON.stringify(v));

// params renders a run's or a schedule's params {name: value} as
// `name=value` chips, or "none".
export function params(values) {
  const entries = Object.entries(values || {});
  if (!entries.length) return html`<span class="muted">none</span>`;
  return joined(entries.map(([k, v]) => html`<code class="param" data-param=${k}>${k}=${valueText(v)}</code>`), ' ');
}

// decls renders a template's declared params as chips "WHO: string*"
// (* required, = its default), or "none".
export function decls(list) {
  if (!list?.length) return html`<span class="muted">none</span>`;
  return joined(list.map((p) => html`<code class="param" data-param=${p.name}>${p.name}: ${p.type || 'string'}${p.required ? '*' : ''}${p.default !== undefined ? ` = ${valueText(p.default)}` : ''}</code>`), ' ');
}
