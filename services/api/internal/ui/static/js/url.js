// url.js: the dashboard's state lives in its URL, so that every view is a
// deep link:
//
//   /ui/?project=P&domain=D#/page/path?key=value&…
//
// The query string holds the scope every page reads (project, domain); the
// fragment holds the page (its path) and that page's own state (filters,
// page of a list, tab, chosen task and attempt…). Pages read their state
// when they mount and write it back as it changes (replace: a filter
// typed; push: a step a user may want to go back from). The router mounts
// a page again only when the URL changes under it (a link, Back, an edited
// address), never for a write of its own.

let written = ''; // the URL this module last wrote or the router last mounted

const here = () => location.pathname + location.search + location.hash;

// route is the fragment's page path ("#/runs/r1") and its params.
export function route() {
  const h = location.hash || '#/runs';
  const i = h.indexOf('?');
  return {path: i < 0 ? h : h.slice(0, i), params: new URLSearchParams(i < 0 ? '' : h.slice(i + 1))};
}

// param is the current page's param name, or dflt when absent.
export const param = (name, dflt = '') => route().params.get(name) ?? dflt;

// href is the fragment of page path with params (absent, '' or false
// ones left out): href('#/runs', {phase: 'FAILED'}) → "#/runs?phase=FAILED".
export function href(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '' && v !== false) q.set(k, String(v));
  const s = q.toString();
  return path + (s ? '?' + s : '');
}

function write(search, hash, push) {
  const url = location.pathname + search + hash;
  written = url;
  if (url === here()) return;
  history[push ? 'pushState' : 'replaceState'](null, '', url);
}

// setParams merges patch into the current page's params ('' , null or
// false removes one) and writes the URL without mounting the page again.
export function setParams(patch, {push = false} = {}) {
  const {path, params} = route();
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined || v === null || v === '' || v === false) params.delete(k);
    else params.set(k, String(v));
  }
  const q = params.toString();
  write(location.search, path + (q ? '?' + q : ''), push);
}

// urlScope is the project and domain the query string names ('' when absent).
export function urlScope() {
  const q = new URLSearchParams(location.search);
  return {project: q.get('project') || '', domain: q.get('domain') || ''};
}

// setScope writes project and domain into the query string, keeping the
// fragment; push makes it a step of the history.
export function setScope({project, domain}, {push = false} = {}) {
  const q = new URLSearchParams(location.search);
  q.set('project', project);
  q.set('domain', domain);
  write('?' + q.toString(), location.hash, push);
}

// mounted records the URL a page was mounted for; changed tells whether
// the URL moved since (or since this module's last write).
export const mounted = () => { written = here(); };
export const changed = () => here() !== written;
