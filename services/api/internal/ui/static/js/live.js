// live.js: keep a page current from an event stream. On every event the
// page re-fetches the REST resource it shows (simple and correct); a dropped
// stream reconnects with Last-Event-ID. Only when the stream route answers
// 404 (an api without event streams) does the page re-fetch on a timer.

import {stream} from './api.js';

const POLL_MS = 2000;      // re-fetch period without an event stream
const RECONNECT_MS = 1000; // wait before reconnecting a dropped stream

function indicator(state, title) {
  const el = document.getElementById('live');
  el.className = 'live ' + state;
  el.title = title;
}

// coalesce wraps an async refresh so that a burst of events runs it at most
// once at a time, plus once more after the burst.
export function coalesce(refresh) {
  let running = false;
  let again = false;
  const run = async () => {
    if (running) { again = true; return; }
    running = true;
    try { await refresh(); } catch (e) { console.warn('refresh', e); }
    running = false;
    if (again) { again = false; run(); }
  };
  return run;
}

const pause = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
});

// watch follows the event stream at path and calls refresh on each event
// (coalesced), and once each time the stream opens (what changed before it
// did is then read too: a stream of ?start=now sends none of it), and
// onEvent(ev) with each event itself ({id, event, data}, `end` included);
// it starts after lastEventId when given, and stops after an `end` event (a
// terminal run) or when the returned stop function is called.
export function watch(path, refresh, {onEvent = null, lastEventId = ''} = {}) {
  const ctl = new AbortController();
  const signal = ctl.signal;
  const run = coalesce(refresh);
  (async () => {
    let lastId = lastEventId;
    let ended = false;
    while (!signal.aborted && !ended) {
      indicator('on', 'live: ' + path);
      let status = 0;
      try {
        status = await stream(path, (ev) => {
          if (ev.id) lastId = ev.id;
          if (ev.event === 'end') ended = true;
          if (onEvent) onEvent(ev);
          run();
        }, {signal, lastEventId: lastId, onOpen: run});
      } catch (e) {
        if (signal.aborted) return;
      }
      if (status === 404) return poll(run, signal);
      run();
      if (!ended) await pause(RECONNECT_MS, signal);
    }
    indicator('', 'ended');
  })();
  return () => ctl.abort();
}

// poll re-fetches every POLL_MS until signal aborts.
function poll(run, signal) {
  indicator('poll', 'no event stream: re-fetching every 2 s');
  const t = setInterval(run, POLL_MS);
  signal.addEventListener('abort', () => clearInterval(t), {once: true});
}

// every calls refresh each ms milliseconds (for what has no event stream,
// e.g. worker heartbeats) until the returned stop function is called.
export function every(ms, refresh) {
  const run = coalesce(refresh);
  const t = setInterval(run, ms);
  return () => clearInterval(t);
}
