// api.js: the dashboard's access to the Capstan REST API. Every request sends
// `Authorization: Bearer <token>` once a token is set; a 401 asks for a token
// once (kept in sessionStorage) and retries. Refusals throw a ProblemError
// carrying the RFC 9457 problem's detail.

const TOKEN_KEY = 'capstan.token';

// ProblemError is a refused request: status, the problem's code and
// detail, and the fields it names ([{field, message}], field a JSON path
// into the request body such as spec.steps[1].plugin).
export class ProblemError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || '';
    this.errors = Array.isArray(problem.errors) ? problem.errors : [];
  }
}

let asking = null; // the pending token prompt, shared by concurrent 401s

// askToken shows the token form once and resolves with what was entered.
function askToken() {
  if (!asking) {
    asking = new Promise((resolve) => {
      const dlg = document.getElementById('token');
      const input = document.getElementById('token-input');
      input.value = '';
      dlg.addEventListener('close', () => {
        const t = input.value.trim();
        if (t) sessionStorage.setItem(TOKEN_KEY, t);
        asking = null;
        resolve(t);
      }, {once: true});
      dlg.showModal();
    });
  }
  return asking;
}

function headers(extra) {
  const h = new Headers(extra || {});
  const t = sessionStorage.getItem(TOKEN_KEY);
  if (t) h.set('Authorization', 'Bearer ' + t);
  return h;
}

// request fetches path; on 401 it asks for a token and tries once more.
export async function request(path, init = {}) {
  let r = await fetch(path, {...init, headers: headers(init.headers)});
  if (r.status === 401 && await askToken()) {
    r = await fetch(path, {...init, headers: headers(init.headers)});
  }
  return r;
}

async function problemOf(r) {
  const p = await r.json().catch(() => ({}));
  return new ProblemError(r.status, p);
}

// getJSON returns the decoded body of GET path, or throws a ProblemError.
export async function getJSON(path) {
  const r = await request(path);
  if (!r.ok) throw await problemOf(r);
  return r.json();
}

// postJSON posts body as JSON and returns the decoded answer, or throws a
// ProblemError with the API's detail.
export async function postJSON(path, body) {
  const r = await request(path, {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body || {})});
  if (!r.ok) throw await problemOf(r);
  return r.status === 204 ? null : r.json().catch(() => null);
}

// deleteJSON deletes path and returns the decoded answer, or throws a
// ProblemError with the API's detail.
export async function deleteJSON(path) {
  const r = await request(path, {method: 'DELETE'});
  if (!r.ok) throw await problemOf(r);
  return r.json().catch(() => null);
}

// stream reads a text/event-stream response of GET path with fetch (an
// EventSource cannot send the Authorization header) and calls onEvent({id,
// event, data}) per event; comments are skipped; onOpen() once the stream's
// headers arrived. It resolves with the HTTP status once the stream ends
// (200) or was refused (404, …); signal aborts it.
export async function stream(path, onEvent, {signal, lastEventId, onOpen} = {}) {
  const h = {Accept: 'text/event-stream'};
  if (lastEventId) h['Last-Event-ID'] = lastEventId;
  const r = await request(path, {headers: h, signal});
  if (!r.ok || !r.body) return r.status;
  if (onOpen) onOpen();
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev = parseEvent(block);
      if (ev) onEvent(ev);
    }
  }
  return r.status;
}

// parseEvent turns one SSE block into {id, event, data}, or null for a
// comment-only block.
function parseEvent(block) {
  const ev = {id: '', event: 'message', data: []};
  let any = false;
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let val = c < 0 ? '' : line.slice(c + 1);
    if (val.startsWith(' ')) val = val.slice(1);
    any = true;
    if (field === 'id') ev.id = val;
    else if (field === 'event') ev.event = val;
    else if (field === 'data') ev.data.push(val);
  }
  if (!any) return null;
  ev.data = ev.data.join('\n');
  return ev;
}
