// graph.js: a run's workflow drawn as a graph with dagre's layered layout:
// DAG mode draws each step's depends_on edges, StepByStep mode the chain in
// spec order. Each node is one step, coloured by its phase, with its tasks
// counted by state (a bar of their shares and the largest counts): a step
// of 10,000 tasks is one node, not 10,000. A node is a link a keyboard
// reaches (Tab) and opens (Enter or Space), as a click does. And the run's
// timeline: one row a step on an axis from the run's creation, one bar an
// attempt of its tasks (the first page of them), in its state's colour.

import dagre from '../vendor/dagre/dagre.esm.js';
import {enc, html, nothing, repeat, stateName, svg} from './dom.js';

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
  if (!total) return nothing;
  let at = x;
  const segs = countsOf(a).map(([st, n]) => {
    const width = (w * n) / total;
    // The colour's class is on a group: a node's rect.status-* is its phase.
    const seg = svg`<g class="status-${stateName(st)}" data-state=${st}><rect class="bar" x=${at} y=${y} width=${width} height="4"></rect></g>`;
    at += width;
    return seg;
  });
  return svg`<rect class="bar-bg" x=${x - 1} y=${y - 1} width=${w + 2} height="6" rx="1"></rect>${segs}`;
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

// The layout depends on the steps and edges only, not on their phases:
// the last one is kept, so a live run is laid out once.
let laidOut = {key: '', g: null};

function layout(run) {
  const steps = (run.spec?.steps || []).map((s) => s.name);
  const edges = edgesOf(run);
  const key = JSON.stringify([steps, edges]);
  if (laidOut.key === key) return laidOut.g;
  const g = new dagre.graphlib.Graph();
  g.setGraph({rankdir: 'LR', nodesep: 16, ranksep: 40, marginx: 12, marginy: 12});
  g.setDefaultEdgeLabel(() => ({}));
  for (const s of steps) g.setNode(s, {width: W, height: H});
  for (const [a, b] of edges) if (g.hasNode(a) && g.hasNode(b)) g.setEdge(a, b);
  dagre.layout(g);
  laidOut = {key, g};
  return g;
}

// graph is the SVG of run's steps; open(step) is called when a node is
// clicked, or on Enter or Space while it has the focus.
export function graph(run, open) {
  const g = layout(run);
  const {width, height} = g.graph();
  const acts = new Map((run.actions || []).map((a) => [a.name, a]));
  const steps = run.spec?.steps || [];
  const edges = g.edges().map((e) => svg`<path class="edge" d="M${g.edge(e).points.map((p) => `${p.x},${p.y}`).join(' L')}" marker-end="url(#arrow)"></path>`);
  const key = (ev, name) => {
    if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); open(name); }
  };
  const node = (s) => {
    const n = g.node(s.name);
    const a = acts.get(s.name);
    const ph = a?.phase || 'QUEUED';
    const tasks = a?.task_count || 0;
    const counts = countsText(a);
    // The lines the node shows; its accessible name starts with them, so
    // what a reader sees is what a voice-control user says.
    const lines = [s.name.slice(0, 20), `${stateName(ph)}${tasks > 1 ? ` · ${tasks} tasks` : ''}`, counts.slice(0, 26)];
    const label = `${lines.filter(Boolean).join(' ')}${counts.length > 26 ? ` (${counts})` : ''}, step of the workflow`;
    return svg`<g class="node status-${stateName(ph)}" data-step=${s.name} data-phase=${ph} data-tasks=${tasks} tabindex="0" role="link"
        aria-label=${label} transform="translate(${n.x - W / 2},${n.y - H / 2})" @click=${() => open(s.name)} @keydown=${(ev) => key(ev, s.name)}>
      <title>${s.name}: ${ph}${tasks ? ` · ${tasks} tasks: ${counts}` : ''}</title>
      <rect class="status-${stateName(ph)}" width=${W} height=${H} rx="6"></rect>
      <text x="8" y="15">${lines[0]}</text>
      <text x="8" y="29" opacity=".85">${lines[1]}</text>
      <text class="counts" x="8" y="41" opacity=".85">${lines[2]}</text>
      ${countsBar(a, 8, 44, W - 16)}</g>`;
  };
  return html`<svg width=${width} height=${height} role="group" aria-label="workflow graph: ${steps.length} steps">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto">
      <path d="M0,0 L10,5 L0,10 z"></path></marker></defs>
    ${edges}${repeat(steps, (s) => s.name, node)}</svg>`;
}

// TICKS are the axis steps a timeline picks from, in ms: the first that
// makes at most 8 ticks.
const TICKS = [100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 216e5, 432e5, 864e5];

// axisText is an offset on the axis: "+500ms", "+15s", "+2m30s", "+1h".
function axisText(ms) {
  if (ms === 0) return '0';
  if (ms < 1000) return `+${ms}ms`;
  if (ms < 6e4) return `+${Math.round(ms / 1000)}s`;
  const s = Math.round(ms / 1000);
  if (ms < 36e5) return `+${Math.floor(s / 60)}m${s % 60 ? (s % 60) + 's' : ''}`;
  const m = Math.floor(s / 60);
  return `+${Math.floor(m / 60)}h${m % 60 ? (m % 60) + 'm' : ''}`;
}

// ticks are the axis's [offset ms, percent] from 0 to total.
function ticks(total) {
  const step = TICKS.find((t) => total / t <= 8) || Math.ceil(total / 8);
  const out = [];
  for (let t = 0; t <= total; t += step) out.push([t, (100 * t) / total]);
  return out;
}

const LANE = 10; // px a task's lane takes in a row

// timeline is the run's steps on an axis from its creation to its end (or
// now): a row a step, a lane a task (the first page of its tasks), a bar
// an attempt from its start to its end, in its state's colour; a step
// without tasks (approval, suspend) has one bar of its own span.
// fmtSpan formats a step's duration.
export function timeline(run, fmtSpan) {
  const t0 = Date.parse(run.created_at);
  const t1 = run.ended_at ? Date.parse(run.ended_at) : Date.now();
  const total = Math.max(t1 - t0, 1);
  const pct = (t) => Math.min(Math.max((100 * (Date.parse(t) - t0)) / total, 0), 100);
  const axis = ticks(total);
  const grid = axis.map(([, p]) => svg`<line class="grid" x1="${p}%" x2="${p}%" y1="0" y2="100%"></line>`);
  const bar = (start, end, lane, state, title, data = {}) => {
    const left = pct(start);
    const right = end ? pct(end) : 100;
    return svg`<rect class="bar status-${stateName(state)}" x="${left}%" width="${Math.max(right - left, 0.3)}%" y=${2 + lane * LANE}
      height=${LANE - 2} rx="2" data-task=${data.task ?? ''} data-attempt=${data.attempt ?? ''} data-state=${state}><title>${title}</title></rect>`;
  };
  const row = (a) => {
    const tasks = a.tasks || [];
    const attempts = tasks.flatMap((t, lane) => (t.attempts || []).map((at) => ({t, at, lane})));
    const lanes = Math.max(tasks.length, 1);
    let bars;
    if (attempts.length) {
      bars = attempts.map(({t, at, lane}) => bar(at.started_at || at.created_at, at.finished_at, lane, at.state,
        `task ${t.index} attempt #${at.number}: ${stateName(at.state)} · ${fmtSpan(at.started_at || at.created_at, at.finished_at)}`,
        {task: t.index, attempt: at.number}));
    } else if (a.started_at) {
      bars = bar(a.started_at, a.ended_at, 0, a.phase, `${a.name}: ${stateName(a.phase)} · ${fmtSpan(a.started_at, a.ended_at)}`);
    } else {
      bars = nothing;
    }
    const more = a.task_count > tasks.length ? html` <span class="muted">(${tasks.length} of ${a.task_count} tasks)</span>` : nothing;
    return html`<div class="row" data-step=${a.name}>
      <span class="label"><a href="#/runs/${enc(run.name)}/actions/${enc(a.name)}">${a.name}</a>${more}</span>
      <svg class="track" width="100%" height=${lanes * LANE + 2} role="img" aria-label="${a.name}: ${stateName(a.phase)}${attempts.length ? `, ${attempts.length} attempts` : ''}">${grid}${bars}</svg>
      <span>${a.started_at ? fmtSpan(a.started_at, a.ended_at) : html`<span class="muted">not started</span>`}</span></div>`;
  };
  const acts = (run.actions || []).filter((a) => a.name !== 'a0');
  return html`<div class="row axis"><span class="muted">from creation</span>
      <svg class="axis" width="100%" height="20" aria-hidden="true">${axis.map(([t, p], i) => svg`<line x1="${p}%" x2="${p}%" y1="0" y2="5"></line>
        <text x="${p}%" y="16" text-anchor=${i === 0 ? 'start' : p > 95 ? 'end' : 'middle'}>${axisText(t)}</text>`)}</svg><span></span></div>
    ${repeat(acts, (a) => a.name, row)}`;
}
