// yaml.js: specs as YAML, the form people write them in, through js-yaml
// (vendored) with YAML 1.2's core schema: null, booleans, numbers and
// strings, and no timestamps or tags that JSON has no value for.

import {CORE_SCHEMA, dump, load} from '../vendor/js-yaml/js-yaml.mjs';

// toYAML is value (any JSON value) as a YAML document.
export const toYAML = (value) => dump(value, {schema: CORE_SCHEMA, lineWidth: -1, noRefs: true});

// YAMLError is text that is not YAML: its message and the 1-based line
// and column where the parser stopped (0 when unknown).
export class YAMLError extends Error {
  constructor(message, line, column) {
    super(message);
    this.line = line;
    this.column = column;
  }
}

// fromYAML parses one YAML document into JSON values, or throws a YAMLError.
export function fromYAML(text) {
  try {
    return load(text, {schema: CORE_SCHEMA, json: true});
  } catch (e) {
    const mark = e.mark || {};
    throw new YAMLError(e.reason || e.message, mark.line != null ? mark.line + 1 : 0, mark.column != null ? mark.column + 1 : 0);
  }
}
