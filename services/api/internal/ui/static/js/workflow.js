// workflow.js: one workflow template: a version (the latest, or the one the
// URL names) with its params and its spec as YAML, every version of it,
// newest first, and a link to start a run of it. Versions are immutable,
// so the page reads them once.

import {getJSON} from './api.js';
import {base, enc, html, nothing, render, showError, time} from './dom.js';
import {valueText} from './origin.js';
import {onPrefs} from './prefs.js';
import {href} from './url.js';
import {toYAML} from './yaml.js';

export function mount(view, {workflow: name, version}) {
  let shown = null;
  let versions = [];
  const draw = () => render(page(name, shown, versions), view);
  draw();
  (async () => {
    try {
      const list = await getJSON(`${base()}/workflows/${enc(name)}/versions`);
      shown = version ? list.workflows.find((t) => t.version === +version) : list.workflows[0];
      if (!shown) throw new Error(`workflow ${name} has no version ${version}`);
      versions = list.workflows;
      draw();
    } catch (e) { showError(e); }
  })();
  return onPrefs(draw);
}

function page(name, t, versions) {
  const back = html`<p><a href="#/workflows">← workflows</a></p>`;
  if (!t) return html`${back}<h2 id="workflow-title">${name}</h2>`;
  const latest = versions[0].version === t.version;
  return html`${back}
    <h2 id="workflow-title">${t.name} <span id="workflow-version" data-version=${t.version}>version ${t.version}</span>${latest ? html` <span class="muted">(latest)</span>` : nothing}</h2>
    <p id="workflow-meta" class="muted">${t.description ? t.description + ' · ' : ''}pushed ${time(t.created_at)} · mode ${t.spec.mode || 'StepByStep'} · ${t.spec.steps.length} step(s)</p>
    <p><a class="button primary" id="workflow-run" href=${href('#/new', {workflow: t.name, version: latest ? '' : t.version})}>Start a run…</a></p>
    <h3>Params</h3><table><thead><tr><th scope="col">param</th><th scope="col">type</th><th scope="col">required</th><th scope="col">default</th><th scope="col">description</th></tr></thead>
    <tbody id="workflow-params">${t.params.length ? t.params.map(paramRow) : html`<tr><td colspan="5" class="muted">No params.</td></tr>`}</tbody></table>
    <h3>Spec</h3><pre class="spec" id="workflow-spec" role="region" tabindex="0" aria-label="the template's spec as YAML">${toYAML(t.spec)}</pre>
    <h3>Versions</h3><table><thead><tr><th scope="col">version</th><th scope="col">created</th><th scope="col">params</th><th scope="col">description</th></tr></thead>
    <tbody id="workflow-versions">${versions.map((v) => html`<tr data-version=${v.version} class=${v.version === t.version ? 'current' : ''}>
      <td><a href="#/workflows/${enc(v.name)}/versions/${v.version}">${v.version}</a></td><td class="muted">${time(v.created_at)}</td>
      <td>${v.params.map((p) => p.name).join(', ') || html`<span class="muted">none</span>`}</td><td>${v.description}</td></tr>`)}</tbody></table>`;
}

const paramRow = (p) => html`<tr data-param=${p.name}><td><code>${p.name}</code></td><td class="param-type">${p.type || 'string'}</td>
    <td class="param-required">${p.required ? 'yes' : 'no'}</td>
    <td class="param-default">${p.default !== undefined ? html`<code>${valueText(p.default)}</code>` : html`<span class="muted">—</span>`}</td>
    <td>${p.description || ''}</td></tr>`;
