// schema.js: a workflow spec checked against the spec's JSON Schema
// (schema/workflow.json, JSON Schema 2020-12, the copy served beside the
// dashboard) with @cfworker/json-schema (vendored), before a run of it is
// sent: what the schema refuses is named by its field, as the API names
// it (spec.steps[0].replicas).

import {Validator} from '../vendor/json-schema/index.js';

let loading = null;

// validator resolves with the Validator of the workflow spec schema,
// fetched once (a public file under /ui/, no token needed); it rejects
// when the schema cannot be had.
function validator() {
  if (!loading) {
    loading = fetch('schema/workflow.json').then((r) => {
      if (!r.ok) throw new Error(`schema/workflow.json: HTTP ${r.status}`);
      return r.json();
    }).then((schema) => new Validator(schema, '2020-12', false));
    loading.catch(() => { loading = null; }); // a later check fetches again
  }
  return loading;
}

// STRUCTURAL are the keywords whose errors only say that a part below
// failed: the part's own error says how.
const STRUCTURAL = new Set(['properties', 'items', 'prefixItems', '$ref', 'allOf', 'additionalProperties', 'unevaluatedProperties']);

// fieldOf turns an instance location ("#/steps/0/replicas") into the
// field it names under prefix ("spec.steps[0].replicas").
export function fieldOf(prefix, location) {
  let f = prefix;
  for (const raw of location.replace(/^#\/?/, '').split('/').filter(Boolean)) {
    const part = raw.replaceAll('~1', '/').replaceAll('~0', '~');
    f += /^\d+$/.test(part) ? `[${part}]` : `.${part}`;
  }
  return f;
}

// specErrors resolves with what the schema refuses in spec, as [{field,
// message}] with fields under prefix (e.g. "spec"); [] for a valid spec.
export async function specErrors(spec, prefix = 'spec') {
  const v = await validator();
  const res = v.validate(spec);
  if (res.valid) return [];
  const out = [];
  const seen = new Set();
  for (const e of res.errors) {
    if (STRUCTURAL.has(e.keyword)) continue;
    const field = fieldOf(prefix, e.instanceLocation);
    // A property the schema has no place for fails the `false` schema.
    const message = e.keyword === 'false' ? 'unknown field' : e.error;
    const key = field + '\n' + message;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({field, message});
  }
  return out;
}
