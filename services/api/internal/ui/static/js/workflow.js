// workflow.js: one workflow template: a version (the latest, or the one the
// URL names) with its params and its spec, and every version of it, newest
// first. Versions are immutable, so the page reads them once.

import {getJSON} from './api.js';
import {base, enc, esc, fmtTime, showError} from './dom.js';
import {valueText} from './origin.js';

export function mount(view, {workflow: name, version}) {
  view.innerHTML = `<p><a href="#/workflows">← workflows</a></p>
    <h2 id="workflow-title"></h2><p id="workflow-meta" class="muted"></p>
    <h3>Params</h3><table><thead><tr><th>param</th><th>type</th><th>required</th><th>default</th><th>description</th></tr></thead>
    <tbody id="workflow-params"></tbody></table>
    <h3>Spec</h3><pre class="spec" id="workflow-spec"></pre>
    <h3>Versions</h3><table><thead><tr><th>version</th><th>created</th><th>params</th><th>description</th></tr></thead>
    <tbody id="workflow-versions"></tbody></table>`;
  (async () => {
    try {
      const list = await getJSON(`${base()}/workflows/${enc(name)}/versions`);
      const shown = version ? list.workflows.find((t) => t.version === +version) : list.workflows[0];
      if (!shown) throw new Error(`workflow ${name} has no version ${version}`);
      draw(view, shown, list.workflows);
    } catch (e) { showError(e); }
  })();
  return () => {};
}

function draw(view, t, versions) {
  const q = (id) => view.querySelector('#' + id);
  const latest = versions[0].version === t.version;
  q('workflow-title').innerHTML = `${esc(t.name)} <span id="workflow-version" data-version="${t.version}">version ${t.version}</span>` +
    `${latest ? ' <span class="muted">(latest)</span>' : ''}`;
  q('workflow-meta').textContent = `${t.description ? t.description + ' · ' : ''}pushed ${fmtTime(t.created_at)} · ` +
    `mode ${t.spec.mode || 'StepByStep'} · ${t.spec.steps.length} step(s)`;
  q('workflow-params').innerHTML = t.params.map(paramRow).join('') || '<tr><td colspan="5" class="muted">No params.</td></tr>';
  q('workflow-spec').textContent = JSON.stringify(t.spec, null, 2);
  q('workflow-versions').innerHTML = versions.map((v) => `<tr data-version="${v.version}"${v.version === t.version ? ' class="current"' : ''}>
    <td><a href="#/workflows/${enc(v.name)}/versions/${v.version}">${v.version}</a></td><td class="muted">${fmtTime(v.created_at)}</td>
    <td>${v.params.map((p) => esc(p.name)).join(', ') || '<span class="muted">none</span>'}</td><td>${esc(v.description)}</td></tr>`).join('');
}

function paramRow(p) {
  return `<tr data-param="${esc(p.name)}"><td><code>${esc(p.name)}</code></td><td class="param-type">${esc(p.type || 'string')}</td>
    <td class="param-required">${p.required ? 'yes' : 'no'}</td>
    <td class="param-default">${p.default !== undefined ? `<code>${esc(valueText(p.default))}</code>` : '<span class="muted">—</span>'}</td>
    <td>${esc(p.description || '')}</td></tr>`;
}
