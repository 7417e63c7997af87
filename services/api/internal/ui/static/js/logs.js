// logs.js: one attempt's output, followed live while it runs: GET
// .../logs?follow=true&timestamps=true streams its chunks (each with the
// time it was stored), resuming with Last-Event-ID when the stream breaks
// off, until `end` carries the attempt's final state. Lines keep their
// ANSI colours and the time of the chunk they started in; a search shows
// only the lines that hold its text; the output downloads as a text file.
// The lines are appended to the <pre> as they come (never redrawn), so a
// long log stays cheap and its scroll position is kept: a reader at the
// bottom stays at the bottom, one scrolled up stays where they are.

import {stream} from './api.js';
import {segments, plain, styled} from './ansi.js';
import {utcText} from './dom.js';
import {timeMode} from './prefs.js';

const RECONNECT_MS = 1000; // wait before resuming a broken log stream

// stampText is a log line's time: HH:MM:SS.mmm in UTC or local time.
function stampText(t) {
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  if (timeMode === 'utc') return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}.${pad(d.getUTCMilliseconds(), 3)}`;
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

// splitStamp splits a chunk's text "2024-…Z text" into its time and text.
export function splitStamp(data) {
  const i = data.indexOf(' ');
  if (i > 0 && /^\d{4}-\d\d-\d\dT/.test(data)) return {at: data.slice(0, i), text: data.slice(i + 1)};
  return {at: '', text: data};
}

// LogView holds the lines of one attempt's output in pre.
export class LogView {
  constructor(pre, onChange) {
    this.pre = pre;
    this.onChange = onChange || (() => {});
    this.needle = '';
    this.reset();
  }

  reset() {
    this.pre.replaceChildren();
    this.lines = []; // {el, body, stream, at, text, shown}
    this.open = null; // the last line while it has no line break yet
    this.ansi = {stdout: {state: plain(), rest: ''}, stderr: {state: plain(), rest: ''}};
    this.shown = 0;
  }

  // add appends a chunk of stream's output, shipped at time at (RFC 3339,
  // '' unknown). A line break ends a line; a line another stream
  // interrupts ends there too.
  add(streamName, at, data) {
    const ansi = this.ansi[streamName] || this.ansi.stdout;
    const {out, rest} = segments(ansi.rest + data, ansi.state);
    ansi.rest = rest;
    const atBottom = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 4;
    for (const seg of out) {
      seg.text.split('\n').forEach((part, i) => {
        if (i > 0) this.end(this.lineFor(streamName, at));
        if (part === '') return;
        const line = this.lineFor(streamName, at);
        line.text += part;
        line.body.appendChild(styled(document.createElement('span'), {text: part, s: seg.s}));
        this.filter(line);
      });
    }
    if (atBottom) this.pre.scrollTop = this.pre.scrollHeight;
    this.onChange();
  }

  // lineFor is the open line of stream, or a new one begun at time at.
  lineFor(streamName, at) {
    if (this.open && this.open.stream !== streamName) this.end(this.open);
    if (this.open) return this.open;
    const el = document.createElement('span');
    el.className = 'line ' + streamName;
    const ts = document.createElement('span');
    ts.className = 'ts';
    ts.textContent = at ? stampText(at) : '';
    if (at) ts.title = utcText(at);
    const body = document.createElement('span');
    body.className = 'out';
    el.append(ts, body);
    this.pre.appendChild(el);
    const line = {el, body, stream: streamName, at, text: '', shown: true};
    this.lines.push(line);
    this.shown++;
    this.open = line;
    this.filter(line);
    return line;
  }

  end(line) {
    if (this.open === line) this.open = null;
  }

  // search shows only the lines holding needle (case-insensitive); '' all.
  search(needle) {
    this.needle = needle.toLowerCase();
    for (const l of this.lines) this.filter(l);
    this.onChange();
  }

  filter(l) {
    const shown = !this.needle || l.text.toLowerCase().includes(this.needle);
    if (l.shown === shown) return;
    l.el.hidden = !shown;
    l.shown = shown;
    this.shown += shown ? 1 : -1;
  }

  // text is the output as plain text (escape sequences gone), a line each,
  // each after its time (RFC 3339, UTC) when withTimes.
  text(withTimes) {
    return this.lines.map((l) => `${withTimes && l.at ? l.at + ' ' : ''}${l.stream === 'stderr' ? '[stderr] ' : ''}${l.text}\n`).join('');
  }
}

// follow streams url into view until `end`, resuming with Last-Event-ID
// when the stream breaks off (an api restart), and resolves with the
// attempt's final state ('' when stopped first); a refusal is shown in the
// view's pre.
export async function follow(url, view, signal) {
  let state = '';
  let lastId = '';
  const onEvent = (ev) => {
    if (ev.id) lastId = ev.id;
    if (ev.event === 'end') { state = ev.data; return; }
    if (ev.event !== 'stdout' && ev.event !== 'stderr') return;
    const {at, text} = splitStamp(ev.data);
    view.add(ev.event, at, text);
  };
  while (!state && !signal.aborted) {
    let status = 0;
    try {
      status = await stream(url, onEvent, {signal, lastEventId: lastId});
    } catch (e) {
      if (signal.aborted) break;
    }
    if (status && status !== 200) {
      view.pre.textContent = `(logs unavailable: HTTP ${status})`;
      break;
    }
    if (!state && !signal.aborted) await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
  }
  return state;
}

// download saves text as a file named name.
export function download(name, text) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([text], {type: 'text/plain;charset=utf-8'}));
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}
