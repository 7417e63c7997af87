// new.js: start a run, of a workflow template with its params (a field a
// declared param, typed as it is declared), or of a workflow spec written
// as YAML (a run request: `spec`, and optionally `params` and `name`; a
// document of `steps` alone is taken as the spec). The form checks what it
// can before it sends (YAML that parses, a spec the spec's JSON Schema
// accepts, required params, values of their type, a run name the API
// accepts), and shows the
// API's refusal next to the field it names (spec.steps[1].plugin,
// params.WHO, name). The URL holds the mode, template and version, and
// the run whose spec to start again (from).

import {getJSON, postJSON} from './api.js';
import {base, enc, html, nothing, render, showError} from './dom.js';
import {decls, valueText} from './origin.js';
import {specErrors} from './schema.js';
import {param, setParams} from './url.js';
import {YAMLError, fromYAML, toYAML} from './yaml.js';

const NAME_RE = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

const EXAMPLE = `# A run request: the spec to run, and optionally params and a name.
spec:
  mode: DAG
  steps:
    - name: hello
      command: echo hello
    - name: world
      depends_on: [hello]
      command: echo world
`;

export function mount(view) {
  const st = {
    mode: param('mode'), templates: null, workflow: param('workflow'), version: param('version'), versions: [],
    values: {}, name: '', yaml: EXAMPLE, errors: {}, problem: null, sending: false,
    parsed: null, // the YAML document last parsed, for the schema check
    checked: false, // Check found nothing to refuse in the YAML as it is
  };
  let left = false;
  const draw = () => { if (!left) render(page(st, ui), view); };

  const shownTemplate = () => {
    if (!st.workflow) return null;
    return st.versions.find((t) => String(t.version) === st.version) || st.versions[0] || null;
  };
  const loadVersions = async () => {
    st.versions = [];
    if (!st.workflow) return draw();
    try {
      const list = await getJSON(`${base()}/workflows/${enc(st.workflow)}/versions`);
      st.versions = list.workflows;
      draw();
    } catch (e) { showError(e); }
  };
  const ui = {
    setMode: (m) => { st.mode = m; st.errors = {}; st.problem = null; setParams({mode: m}); draw(); },
    setWorkflow: (w) => { st.workflow = w; st.version = ''; st.values = {}; st.errors = {}; setParams({workflow: w, version: ''}); loadVersions(); },
    setVersion: (v) => { st.version = v; st.errors = {}; setParams({version: v}); draw(); },
    setValue: (k, v) => { st.values[k] = v; },
    setName: (v) => { st.name = v; },
    setYAML: (v) => { st.yaml = v; if (st.checked) { st.checked = false; draw(); } },
    check: async () => {
      st.errors = {};
      st.problem = null;
      const body = prepare(st, shownTemplate());
      await schemaCheck(st);
      st.checked = !!body && !Object.keys(st.errors).length;
      draw();
      focusError(view);
    },
    submit: async (ev) => {
      ev.preventDefault();
      st.errors = {};
      st.problem = null;
      st.checked = false;
      const body = prepare(st, shownTemplate());
      await schemaCheck(st);
      if (!body || Object.keys(st.errors).length) { draw(); focusError(view); return; }
      st.sending = true;
      draw();
      try {
        const run = await postJSON(`${base()}/runs`, body);
        showError(null);
        location.hash = `#/runs/${enc(run.name)}`;
      } catch (e) {
        st.sending = false;
        refusal(st, e);
        draw();
        focusError(view);
      }
    },
    shownTemplate,
  };

  draw();
  (async () => {
    try {
      const list = await getJSON(`${base()}/workflows?limit=500`);
      st.templates = list.workflows;
      if (param('from')) {
        const run = await getJSON(`${base()}/runs/${enc(param('from'))}`);
        const doc = {};
        if (run.params && Object.keys(run.params).length) doc.params = run.params;
        doc.spec = run.spec;
        st.yaml = `# The spec of run ${run.name}.\n` + toYAML(doc);
        st.mode = st.mode || 'yaml';
      }
      if (!st.mode) st.mode = st.templates.length ? 'template' : 'yaml';
      if (st.mode === 'template' && !st.workflow && st.templates.length) st.workflow = st.templates[0].name;
      draw();
      loadVersions();
    } catch (e) { showError(e); }
  })();
  return () => { left = true; };
}

// prepare checks the form and returns the run request, or null with
// st.errors set (field → message, fields named as the API names them).
function prepare(st, tmpl) {
  const errs = st.errors;
  const body = {};
  st.parsed = null;
  const name = st.name.trim();
  if (name) {
    if (NAME_RE.test(name)) body.name = name;
    else errs.name = 'lower-case letters, digits and dashes, at most 63, starting and ending with a letter or digit';
  }
  if (st.mode === 'template') {
    if (!tmpl) { errs.workflow = 'choose a template'; return null; }
    body.workflow = {name: tmpl.name};
    if (st.version) body.workflow.version = +st.version;
    const params = {};
    for (const p of tmpl.params || []) {
      const raw = st.values[p.name];
      if (raw === undefined || raw === '') {
        if (p.required && p.default === undefined) errs['params.' + p.name] = 'required';
        continue;
      }
      const v = typed(p.type || 'string', raw);
      if (v.error) errs['params.' + p.name] = v.error;
      else params[p.name] = v.value;
    }
    if (Object.keys(params).length) body.params = params;
  } else {
    let doc;
    try {
      doc = fromYAML(st.yaml);
    } catch (e) {
      errs.yaml = e instanceof YAMLError && e.line ? `line ${e.line}, column ${e.column}: ${e.message}` : e.message;
      return null;
    }
    if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
      errs.yaml = 'the document must be a mapping: spec (with steps), and optionally params and name';
      return null;
    }
    if (!('spec' in doc) && 'steps' in doc) doc = {spec: doc};
    st.parsed = doc;
    for (const k of Object.keys(doc)) if (!['spec', 'params', 'name', 'workflow'].includes(k)) errs[k] = `unknown field: a run request has spec, params and name`;
    if (doc.workflow === undefined && doc.spec === undefined) errs.spec = 'required: a mapping with steps';
    if (doc.params !== undefined && (typeof doc.params !== 'object' || doc.params === null || Array.isArray(doc.params))) errs.params = 'a mapping of param names to values';
    if (doc.name !== undefined && body.name === undefined) body.name = doc.name;
    Object.assign(body, {...doc, name: body.name});
    if (body.name === undefined) delete body.name;
  }
  return Object.keys(errs).length ? null : body;
}

// schemaCheck adds to st.errors what the spec's JSON Schema refuses in
// the spec of the YAML document prepare parsed (a template's run is the
// API's to check). When the schema cannot be had, it checks what the API
// would refuse first (checkSpec) and leaves the rest to the API.
async function schemaCheck(st) {
  const doc = st.parsed;
  if (st.mode !== 'yaml' || !doc || doc.workflow !== undefined || doc.spec === undefined) return;
  try {
    for (const {field, message} of await specErrors(doc.spec)) {
      st.errors[field] = st.errors[field] ? st.errors[field] + '; ' + message : message;
    }
  } catch (e) {
    console.warn('schema', e);
    checkSpec(doc.spec, st.errors);
  }
}

// checkSpec checks what the API would refuse first in spec: a mapping
// whose steps are a list of mappings, each with a name.
function checkSpec(spec, errs) {
  if (!spec || typeof spec !== 'object' || Array.isArray(spec)) { errs.spec = 'required: a mapping with steps'; return; }
  if (!Array.isArray(spec.steps) || !spec.steps.length) { errs['spec.steps'] = 'a list of at least one step'; return; }
  spec.steps.forEach((s, i) => {
    if (!s || typeof s !== 'object' || Array.isArray(s)) errs[`spec.steps[${i}]`] = 'a step is a mapping';
    else if (typeof s.name !== 'string' || !s.name) errs[`spec.steps[${i}].name`] = 'required';
  });
}

// typed is raw (a field's text) as a value of a param's type.
function typed(type, raw) {
  switch (type) {
    case 'number': {
      const n = Number(raw);
      return Number.isFinite(n) && String(raw).trim() !== '' ? {value: n} : {error: 'a number'};
    }
    case 'boolean':
      return raw === 'true' || raw === 'false' ? {value: raw === 'true'} : {error: 'true or false'};
    case 'json':
      try { return {value: JSON.parse(raw)}; } catch (e) { return {error: 'JSON: ' + e.message}; }
    default:
      return {value: String(raw)};
  }
}

// refusal puts the API's refusal e next to the fields it names; what
// names no field of the form shows above the submit button.
function refusal(st, e) {
  st.problem = e;
  for (const f of e.errors || []) {
    const field = String(f.field || '');
    st.errors[field] = st.errors[field] ? st.errors[field] + '; ' + f.message : f.message;
  }
}

function focusError(view) {
  view.querySelector('[aria-invalid="true"]')?.focus();
}

// slot is where a field's error shows: name, a param's field, the
// template choice, or the YAML editor (spec…, and params in YAML mode).
function slot(st, field) {
  if (field === 'name') return 'name';
  if (field === 'workflow' || field.startsWith('workflow.')) return st.mode === 'template' ? 'workflow' : 'yaml';
  if (field.startsWith('params.') && st.mode === 'template') return 'param:' + field.slice('params.'.length);
  return st.mode === 'yaml' ? 'yaml' : '';
}

// errorsAt are the messages of the fields shown at slot s, "field: message".
function errorsAt(st, s) {
  return Object.entries(st.errors).filter(([f]) => slot(st, f) === s).map(([f, m]) => (f === 'yaml' || s.startsWith('param:') || s === f ? m : `${f}: ${m}`));
}

const fieldError = (id, msgs) => (msgs.length ? html`<div class="field-error" id=${id}>${msgs.map((m) => html`<div>${m}</div>`)}</div>` : nothing);

function page(st, ui) {
  const tmpl = ui.shownTemplate();
  const nameErr = errorsAt(st, 'name');
  const unplaced = Object.entries(st.errors).filter(([f]) => slot(st, f) === '');
  return html`<h2>New run</h2>
    <form id="new-run" class="form" @submit=${ui.submit} novalidate>
      <fieldset class="modes"><legend>Start from</legend>
        <label><input type="radio" name="mode" id="new-mode-template" value="template" .checked=${st.mode === 'template'}
          @change=${() => ui.setMode('template')}> a workflow template</label>
        <label><input type="radio" name="mode" id="new-mode-yaml" value="yaml" .checked=${st.mode === 'yaml'}
          @change=${() => ui.setMode('yaml')}> a spec in YAML</label>
      </fieldset>
      ${st.mode === 'template' ? templateFields(st, ui, tmpl) : st.mode === 'yaml' ? yamlFields(st, ui) : html`<p class="muted">Loading…</p>`}
      <div class="field"><label for="new-name">run name <span class="muted">(optional: the server makes one)</span></label>
        <input id="new-name" name="name" size="40" .value=${st.name} @input=${(ev) => ui.setName(ev.target.value)}
          aria-invalid=${nameErr.length ? 'true' : 'false'} aria-describedby="new-name-error">
        ${fieldError('new-name-error', nameErr)}</div>
      <div id="new-problem" role="alert">${st.problem ? html`<p class="field-error">${st.problem.message}${st.problem.status ? ` (${st.problem.status}${st.problem.code ? ' ' + st.problem.code : ''})` : ''}</p>` : nothing}
        ${unplaced.length ? html`<ul class="field-error">${unplaced.map(([f, m]) => html`<li><code>${f}</code>: ${m}</li>`)}</ul>` : nothing}</div>
      <p><button class="primary" id="new-submit" ?disabled=${st.sending || !st.mode}>${st.sending ? 'Starting…' : 'Start run'}</button>
        ${st.mode === 'yaml' ? html`<button type="button" id="new-check" @click=${ui.check}>Check</button>
          <span id="new-checked" class="muted" role="status">${st.checked ? 'The spec matches its schema.' : ''}</span>` : nothing}</p>
    </form>`;
}

function templateFields(st, ui, tmpl) {
  if (st.templates && !st.templates.length) {
    return html`<p class="muted" id="new-no-templates">No workflow template in this project and domain: push one (POST …/workflows), or start from a YAML spec.</p>`;
  }
  const wfErr = errorsAt(st, 'workflow');
  return html`<div class="field"><label for="new-workflow">template</label>
      <select id="new-workflow" @change=${(ev) => ui.setWorkflow(ev.target.value)} aria-invalid=${wfErr.length ? 'true' : 'false'} aria-describedby="new-workflow-error">
        ${(st.templates || []).map((t) => html`<option value=${t.name} ?selected=${t.name === st.workflow}>${t.name}</option>`)}</select>
      <label for="new-version">version</label>
      <select id="new-version" @change=${(ev) => ui.setVersion(ev.target.value)}>
        <option value="" ?selected=${!st.version}>latest</option>
        ${st.versions.map((t) => html`<option value=${t.version} ?selected=${String(t.version) === st.version}>${t.version}</option>`)}</select>
      ${fieldError('new-workflow-error', wfErr)}
      ${tmpl ? html`<p class="muted kv">${tmpl.description || ''} ${tmpl.description ? '· ' : ''}params ${decls(tmpl.params)}</p>` : nothing}</div>
    ${tmpl ? html`<fieldset class="params"><legend>params</legend>
      ${(tmpl.params || []).length ? tmpl.params.map((p) => paramField(st, ui, p)) : html`<p class="muted">This template declares no params.</p>`}</fieldset>` : nothing}`;
}

function paramField(st, ui, p) {
  const id = 'new-param-' + p.name;
  const errs = errorsAt(st, 'param:' + p.name);
  const type = p.type || 'string';
  const hint = `${type}${p.required ? ', required' : ''}${p.default !== undefined ? `, default ${valueText(p.default)}` : ''}`;
  const common = {id, invalid: errs.length ? 'true' : 'false', describedby: `${id}-hint ${id}-error`};
  const on = (ev) => ui.setValue(p.name, ev.target.value);
  let input;
  if (type === 'boolean') {
    input = html`<select id=${common.id} data-param=${p.name} @change=${on} aria-invalid=${common.invalid} aria-describedby=${common.describedby}>
      <option value="" ?selected=${!st.values[p.name]}>${p.default !== undefined ? `default (${valueText(p.default)})` : '—'}</option>
      <option ?selected=${st.values[p.name] === 'true'}>true</option><option ?selected=${st.values[p.name] === 'false'}>false</option></select>`;
  } else if (type === 'json') {
    input = html`<textarea id=${common.id} data-param=${p.name} rows="3" cols="50" spellcheck="false" .value=${st.values[p.name] ?? ''} @input=${on}
      aria-invalid=${common.invalid} aria-describedby=${common.describedby}></textarea>`;
  } else {
    input = html`<input id=${common.id} data-param=${p.name} type=${type === 'number' ? 'number' : 'text'} step="any" size="30" .value=${st.values[p.name] ?? ''}
      placeholder=${p.default !== undefined ? valueText(p.default) : ''} @input=${on} aria-invalid=${common.invalid} aria-describedby=${common.describedby}>`;
  }
  return html`<div class="field param-field" data-param=${p.name}><label for=${id}><code>${p.name}</code>${p.required ? html`<span aria-hidden="true">*</span>` : nothing}</label>
    ${input} <span class="muted kv" id="${id}-hint">${hint}${p.description ? ` · ${p.description}` : ''}</span>
    ${fieldError(`${id}-error`, errs)}</div>`;
}

function yamlFields(st, ui) {
  const errs = errorsAt(st, 'yaml');
  return html`<div class="field"><label for="new-yaml">run request (YAML or JSON)</label>
    <textarea id="new-yaml" rows="18" cols="80" spellcheck="false" autocapitalize="off" .value=${st.yaml} @input=${(ev) => ui.setYAML(ev.target.value)}
      aria-invalid=${errs.length ? 'true' : 'false'} aria-describedby="new-yaml-error"></textarea>
    ${fieldError('new-yaml-error', errs)}</div>`;
}
