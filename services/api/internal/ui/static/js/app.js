// app.js: the dashboard's router. The scope is the URL's query string
// (?project=&domain=), the page its fragment, the page's own state the
// fragment's params (url.js):
//   #/runs?phase=&q=&page=&cursor=   runs list
//   #/runs/{run}?tab=&type=&step=    run page (graph, timeline, steps; event history; spec)
//   #/runs/{run}/actions/{a}?task=&attempt=&gen=&q=   action page (tasks, attempts, logs)
//   #/new?workflow=&version=&from=   a new run, from a template or a YAML spec
//   #/workflows                      templates list
//   #/workflows/{name}[/versions/{v}]  template page (a version, its params and spec, every version)
//   #/schedules                      schedules list
//   #/schedules/{name}               schedule page (next times, recent runs, pause/unpause/trigger)
//   #/concurrency                    the slot ledger (concurrency keys, holders, waiters)
//   #/workers  #/aborts?state=
// Each page module exports mount(view, params) → unmount function.

import {$, showError} from './dom.js';
import {initPrefs} from './prefs.js';
import {changed, mounted, route as current, setScope, urlScope} from './url.js';
import * as runs from './runs.js';
import * as run from './run.js';
import * as action from './action.js';
import * as newRun from './new.js';
import * as workers from './workers.js';
import * as aborts from './aborts.js';
import * as workflows from './workflows.js';
import * as workflow from './workflow.js';
import * as schedules from './schedules.js';
import * as schedule from './schedule.js';
import * as concurrency from './concurrency.js';

const routes = [
  [/^#\/runs\/([^/]+)\/actions\/([^/]+)$/, action, (m) => ({run: decodeURIComponent(m[1]), action: decodeURIComponent(m[2])})],
  [/^#\/runs\/([^/]+)$/, run, (m) => ({run: decodeURIComponent(m[1])})],
  [/^#\/new$/, newRun, () => ({})],
  [/^#\/workflows\/([^/]+)\/versions\/(\d+)$/, workflow, (m) => ({workflow: decodeURIComponent(m[1]), version: m[2]})],
  [/^#\/workflows\/([^/]+)$/, workflow, (m) => ({workflow: decodeURIComponent(m[1])})],
  [/^#\/workflows$/, workflows, () => ({})],
  [/^#\/schedules\/([^/]+)$/, schedule, (m) => ({schedule: decodeURIComponent(m[1])})],
  [/^#\/schedules$/, schedules, () => ({})],
  [/^#\/concurrency$/, concurrency, () => ({})],
  [/^#\/workers$/, workers, () => ({})],
  [/^#\/aborts$/, aborts, () => ({})],
  [/^#\/runs$/, runs, () => ({})],
];

let unmount = null;

function mount() {
  if (unmount) unmount();
  unmount = null;
  showError(null);
  $('live').className = 'live'; // the next page sets it when it follows a stream
  const {path} = current();
  for (const [re, page, params] of routes) {
    const m = path.match(re);
    if (!m) continue;
    document.querySelectorAll('[data-nav]').forEach((a) => {
      const on = path === '#/' + a.dataset.nav || path.startsWith('#/' + a.dataset.nav + '/');
      a.classList.toggle('active', on);
      if (on) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    });
    // A fresh element per page: the listeners a page adds to its view go
    // with it, so a click never reaches a page that is no longer shown.
    const old = $('view');
    const view = old.cloneNode(false);
    old.replaceWith(view);
    mounted();
    unmount = page.mount(view, params(m));
    return;
  }
  location.hash = '#/runs';
}

// onNavigate mounts the page again when the URL moved under it: a link
// (hashchange), Back or Forward (popstate, and hashchange too), an edited
// address; a page's own write of its state moves nothing.
function onNavigate() {
  syncScope();
  if (changed()) mount();
}

// scopeDefault is the scope a URL without one gets: the last one this
// browser used, else demo/dev.
function scopeDefault(id, dflt) {
  try { return localStorage.getItem('capstan.' + id) || dflt; } catch (e) { return dflt; }
}

function remember(id, v) {
  try { localStorage.setItem('capstan.' + id, v); } catch (e) { /* this tab only */ }
}

// syncScope shows the URL's project and domain in the header, writing the
// default into a URL that names none (so a copied link always carries it).
function syncScope() {
  const s = urlScope();
  const project = s.project || scopeDefault('project', 'demo');
  const domain = s.domain || scopeDefault('domain', 'dev');
  if (!s.project || !s.domain) setScope({project, domain});
  $('project').value = project;
  $('domain').value = domain;
}

// initHeader wires the scope inputs (a change is a step in the history and
// mounts the page for the new scope), the name the approvals are signed
// with, and the preferences.
function initHeader() {
  for (const id of ['project', 'domain']) {
    const el = $(id);
    el.addEventListener('change', () => {
      const v = el.value.trim();
      if (!v) { syncScope(); return; }
      remember(id, v);
      setScope({project: $('project').value.trim() || 'demo', domain: $('domain').value.trim() || 'dev'}, {push: true});
      mount();
    });
  }
  const who = $('who');
  who.value = new URLSearchParams(location.search).get('who') || scopeDefault('who', '');
  who.addEventListener('change', () => remember('who', who.value));
  initPrefs($('theme'), $('times'));
}

initHeader();
syncScope();
window.addEventListener('hashchange', onNavigate);
window.addEventListener('popstate', onNavigate);
mount();
