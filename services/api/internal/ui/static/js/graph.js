// graph.js: a run's workflow drawn as a graph with dagre's layered layout:
// DAG mode draws each step's depends_on edges, StepByStep mode the chain in
// spec order. Each node is one step, coloured by its phase, with its tasks
// counted by state (a bar of their shares and the largest counts): a step
// of 10,000 tasks is one node, not 10,000.

import dagre from '../vendor/dagre/dagre.esm.js';
import {esc, stateName} from './dom.js';

const W = 150;
const H = 50;

// SHORT are the task states' labels in a node, in the order they are
// listed: live first, then the ends.
const SHORT = {RUNNING: 'run', BUILDING: 'build', ASSIGNED: 'asgn', PENDING: 'pend', SUCCEEDED: 'ok', FAILED: 'fail',
  KILLED: 'kill', WORKER_FAILED: 'wfail', PREEMPTED: 'pre', UNSCHEDULABLE: 'unsch'};

// countsOf lists an action's task counts as [state, n], in SHORT's order
// (a state it does not know last).
export function countsOf(a) {
  const c = a?.task_counts || {};
  const known = Object.keys(SHORT).filter((st) => c[st] > 0);
  const other = Object.keys(c).filter((st) => !(st in SHORT) && c[st] > 0).sort();
  return [...known, ...other].map((st) => [st, c[st]]);
}

// countsText is "9990 ok · 10 run", "" for a step without tasks.
export const countsText = (a) => countsOf(a).map(([st, n]) => `${n} ${SHORT[st] || stateName(st)}`).join(' · ');

// countsBar is the SVG of a bar at (x, y), w wide, of each state's share
// of the step's tasks, in its Iris colour.
function countsBar(a, x, y, w) {
  const total = a?.task_count || 0;
  if (!total) return '';
  let at = x;
  return `<rect class="bar-bg" x="${x - 1}" y="${y - 1}" width="${w + 2}" height="6" rx="1"></rect>` + countsOf(a).map(([st, n]) => {
    const width = (w * n) / total;
    // The colour's class is on a group: a node's rect.status-* is its phase.
    const seg = `<g class="status-${esc(stateName(st))}" data-state="${esc(st)}"><rect class="bar" x="${at}" y="${y}" width="${width}" height="4"></rect></g>`;
    at += width;
    return seg;
  }).join('');
}

// edgesOf lists [from, to] pairs of the run's steps.
export function edgesOf(run) {
  const steps = run.spec?.steps || [];
  if (run.spec?.mode !== 'DAG') return steps.slice(1).map((s, i) => [steps[i].name, s.name]);
  const acts = new Map((run.actions || []).map((a) => [a.name, a]));
  const out = [];
  for (const s of steps) {
    const deps = new Set([...(s.depends_on || []), ...(acts.get(s.name)?.depends_on || [])]);
    for (const d of deps) out.push([d, s.name]);
  }
  return out;
}

// drawGraph returns the SVG of run's steps; a node links to its action page
// through data-step.
export function drawGraph(run) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({rankdir: 'LR', nodesep: 16, ranksep: 40, marginx: 12, marginy: 12});
  g.setDefaultEdgeLabel(() => ({}));
  const acts = new Map((run.actions || []).map((a) => [a.name, a]));
  const steps = run.spec?.steps || [];
  for (const s of steps) g.setNode(s.name, {width: W, height: H});
  for (const [a, b] of edgesOf(run)) if (g.hasNode(a) && g.hasNode(b)) g.setEdge(a, b);
  dagre.layout(g);
  const {width, height} = g.graph();
  const edges = g.edges().map((e) => {
    const pts = g.edge(e).points.map((p) => `${p.x},${p.y}`);
    return `<path class="edge" d="M${pts.join(' L')}" marker-end="url(#arrow)"></path>`;
  });
  const nodes = steps.map((s) => {
    const n = g.node(s.name);
    const a = acts.get(s.name);
    const ph = a?.phase || 'QUEUED';
    const tasks = a?.task_count || 0;
    const counts = countsText(a);
    return `<g class="node" data-step="${esc(s.name)}" data-phase="${esc(ph)}" data-tasks="${tasks}" transform="translate(${n.x - W / 2},${n.y - H / 2})">
      <title>${esc(s.name)}: ${esc(ph)}${tasks ? ` · ${tasks} tasks: ${esc(counts)}` : ''}</title>
      <rect class="status-${esc(stateName(ph))}" width="${W}" height="${H}" rx="6"></rect>
      <text x="8" y="15">${esc(s.name.slice(0, 20))}</text>
      <text x="8" y="29" opacity=".85">${esc(stateName(ph))}${tasks > 1 ? ` · ${tasks} tasks` : ''}</text>
      <text class="counts" x="8" y="41" opacity=".85">${esc(counts.slice(0, 26))}</text>
      ${countsBar(a, 8, 44, W - 16)}</g>`;
  });
  return `<svg width="${width}" height="${height}" role="img" aria-label="workflow graph">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">
      <path d="M0,0 L10,5 L0,10 z" fill="#8c959f"></path></marker></defs>
    ${edges.join('')}${nodes.join('')}</svg>`;
}

// drawTimeline returns bars of each action's start and end on a shared axis
// from the run's creation to now (or its end).
export function drawTimeline(run, fmtSpan) {
  const t0 = Date.parse(run.created_at);
  const t1 = run.ended_at ? Date.parse(run.ended_at) : Date.now();
  const total = Math.max(t1 - t0, 1);
  const acts = (run.actions || []).filter((a) => a.name !== 'a0');
  return acts.map((a) => {
    if (!a.started_at) return `<div class="row"><span>${esc(a.name)}</span><div class="track"></div><span class="muted">not started</span></div>`;
    const s = Date.parse(a.started_at) - t0;
    const e = (a.ended_at ? Date.parse(a.ended_at) : t1) - t0;
    const left = (100 * s) / total;
    const width = Math.max((100 * (e - s)) / total, 0.5);
    return `<div class="row"><span>${esc(a.name)}</span><div class="track">
      <div class="bar status-${esc(stateName(a.phase))}" style="left:${left}%;width:${width}%"></div></div>
      <span>${fmtSpan(a.started_at, a.ended_at)}</span></div>`;
  }).join('');
}
