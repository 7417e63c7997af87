// graph.js: a run's workflow drawn as a graph with dagre's layered layout:
// DAG mode draws each step's depends_on edges, StepByStep mode the chain in
// spec order. Each node is coloured by its step's phase.

import dagre from '../vendor/dagre/dagre.esm.js';
import {esc, stateName} from './dom.js';

const W = 150;
const H = 36;

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
  const phase = new Map((run.actions || []).map((a) => [a.name, a.phase]));
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
    const ph = phase.get(s.name) || 'QUEUED';
    return `<g class="node" data-step="${esc(s.name)}" data-phase="${esc(ph)}" transform="translate(${n.x - W / 2},${n.y - H / 2})">
      <title>${esc(s.name)}: ${esc(ph)}</title>
      <rect class="status-${esc(stateName(ph))}" width="${W}" height="${H}" rx="6"></rect>
      <text x="8" y="15">${esc(s.name.slice(0, 20))}</text>
      <text x="8" y="29" opacity=".85">${esc(stateName(ph))}</text></g>`;
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
