// app.js: the dashboard's router. Pages live under the URL fragment:
//   #/runs                     runs list
//   #/runs/{run}               run page (graph, timeline, controls)
//   #/runs/{run}/actions/{a}   action page (tasks, attempts, logs)
//   #/workflows                templates list
//   #/workflows/{name}[/versions/{v}]  template page (a version, its params and spec, every version)
//   #/schedules                schedules list
//   #/schedules/{name}         schedule page (next times, recent runs, pause/unpause/trigger)
//   #/concurrency              the slot ledger (concurrency keys, holders, waiters)
//   #/workers  #/aborts
// Each page module exports mount(view, params) → unmount function.

import {$, showError} from './dom.js';
import * as runs from './runs.js';
import * as run from './run.js';
import * as action from './action.js';
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
  [/^#\/workflows\/([^/]+)\/versions\/(\d+)$/, workflow, (m) => ({workflow: decodeURIComponent(m[1]), version: m[2]})],
  [/^#\/workflows\/([^/]+)$/, workflow, (m) => ({workflow: decodeURIComponent(m[1])})],
  [/^#\/workflows$/, workflows, () => ({})],
  [/^#\/schedules\/([^/]+)$/, schedule, (m) => ({schedule: decodeURIComponent(m[1])})],
  [/^#\/schedules$/, schedules, () => ({})],
  [/^#\/concurrency$/, concurrency, () => ({})],
  [/^#\/workers$/, workers, () => ({})],
  [/^#\/aborts$/, aborts, () => ({})],
  [/^#\/runs(\?.*)?$/, runs, () => ({})],
];

let unmount = null;

function route() {
  if (unmount) unmount();
  unmount = null;
  showError(null);
  $('live').className = 'live'; // the next page sets it when it follows a stream
  const hash = location.hash || '#/runs';
  for (const [re, page, params] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', hash.startsWith('#/' + a.dataset.nav)));
    // A fresh element per page: the listeners a page adds to its view go
    // with it, so a click never reaches a page that is no longer shown.
    const old = $('view');
    const view = old.cloneNode(false);
    old.replaceWith(view);
    unmount = page.mount(view, params(m));
    return;
  }
  location.hash = '#/runs';
}

// initScope fills project, domain and name from the URL query, then from
// localStorage, then demo/dev, and re-routes when they change.
function initScope() {
  const q = new URLSearchParams(location.search);
  for (const [id, dflt] of [['project', 'demo'], ['domain', 'dev'], ['who', '']]) {
    const el = $(id);
    el.value = q.get(id) || localStorage.getItem('capstan.' + id) || dflt;
    el.addEventListener('change', () => {
      localStorage.setItem('capstan.' + id, el.value);
      if (id !== 'who') route();
    });
  }
}

initScope();
window.addEventListener('hashchange', route);
route();
