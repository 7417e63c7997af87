// ansi.js: terminal colours in logs. A program's output may carry ANSI SGR
// sequences (ESC [ … m: colours, bold, underline); ansi turns them into
// styled segments and drops every other escape sequence (cursor moves,
// window titles), which a log page cannot honour. The state carries over
// from one chunk to the next, as a terminal's does, and so does an escape
// sequence cut in two by the chunking.

// SGR state: fg and bg are a palette index (0–15, a CSS class) or a CSS
// colour (256-colour and true-colour sequences); the rest are flags.
export const plain = () => ({fg: null, bg: null, bold: false, dim: false, italic: false, underline: false, inverse: false, strike: false});

// An escape sequence: CSI (ESC [ params final), OSC (ESC ] … BEL or ESC \),
// or a two-character one (ESC and one character).
const ESC_RE = /\x1b(?:\[([0-9;:?]*)([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])/g;
// An escape sequence still open at the end of the text.
const OPEN_RE = /\x1b(?:\[[0-9;:?]*|\][^\x07\x1b]*\x1b?)?$/;
// MAX_OPEN bounds the tail kept for the next chunk: a longer one is no
// sequence a terminal would wait for.
const MAX_OPEN = 256;

// xterm's 256-colour palette past the 16 named ones: a 6×6×6 cube, then 24 greys.
function color256(n) {
  if (n < 16) return n;
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return `rgb(${v}, ${v}, ${v})`;
  }
  const i = n - 16;
  const c = (x) => (x ? 55 + x * 40 : 0);
  return `rgb(${c(Math.floor(i / 36))}, ${c(Math.floor(i / 6) % 6)}, ${c(i % 6)})`;
}

// applySGR applies one SGR sequence's params (e.g. "1;31") to state s.
export function applySGR(s, params) {
  const p = params === '' ? [0] : params.split(/[;:]/).map((x) => (x === '' ? 0 : Number(x)));
  for (let i = 0; i < p.length; i++) {
    const n = p[i];
    if (n === 0) Object.assign(s, plain());
    else if (n === 1) s.bold = true;
    else if (n === 2) s.dim = true;
    else if (n === 3) s.italic = true;
    else if (n === 4) s.underline = true;
    else if (n === 7) s.inverse = true;
    else if (n === 9) s.strike = true;
    else if (n === 22) { s.bold = false; s.dim = false; }
    else if (n === 23) s.italic = false;
    else if (n === 24) s.underline = false;
    else if (n === 27) s.inverse = false;
    else if (n === 29) s.strike = false;
    else if (n >= 30 && n <= 37) s.fg = n - 30;
    else if (n >= 90 && n <= 97) s.fg = n - 90 + 8;
    else if (n === 39) s.fg = null;
    else if (n >= 40 && n <= 47) s.bg = n - 40;
    else if (n >= 100 && n <= 107) s.bg = n - 100 + 8;
    else if (n === 49) s.bg = null;
    else if (n === 38 || n === 48) {
      let c = null;
      if (p[i + 1] === 5 && p[i + 2] !== undefined) { c = color256(p[i + 2]); i += 2; }
      else if (p[i + 1] === 2 && p[i + 4] !== undefined) { c = `rgb(${p[i + 2]}, ${p[i + 3]}, ${p[i + 4]})`; i += 4; }
      if (n === 38) s.fg = c; else s.bg = c;
    }
  }
}

// segments splits text into [{text, s}] runs of one style (s a copy of
// the state), applying its SGR sequences to state and dropping other
// escapes. It returns the segments and the tail of text that may be the
// start of a sequence the next chunk completes.
export function segments(text, state) {
  const out = [];
  let rest = '';
  const open = text.match(OPEN_RE);
  if (open && open[0] && open[0].length <= MAX_OPEN) {
    rest = open[0];
    text = text.slice(0, text.length - rest.length);
  }
  let at = 0;
  for (const m of text.matchAll(ESC_RE)) {
    if (m.index > at) out.push({text: text.slice(at, m.index), s: {...state}});
    if (m[2] === 'm') applySGR(state, m[1]);
    at = m.index + m[0].length;
  }
  if (at < text.length) out.push({text: text.slice(at), s: {...state}});
  return {out, rest};
}

// styled fills el with a segment's text and style: the 16 named colours
// as classes ansi-fg-N / ansi-bg-N (the theme picks their shades), others
// as a CSS colour set through the element's style.
export function styled(el, seg) {
  const {s} = seg;
  el.textContent = seg.text;
  let fg = s.fg;
  let bg = s.bg;
  if (s.inverse) [fg, bg] = [bg ?? 'inverse-fg', fg ?? 'inverse-bg'];
  const cls = [];
  if (typeof fg === 'number') cls.push('ansi-fg-' + fg);
  else if (fg === 'inverse-fg') cls.push('ansi-inverse-fg');
  else if (fg) el.style.color = fg;
  if (typeof bg === 'number') cls.push('ansi-bg-' + bg);
  else if (bg === 'inverse-bg') cls.push('ansi-inverse-bg');
  else if (bg) el.style.backgroundColor = bg;
  if (s.bold) cls.push('ansi-bold');
  if (s.dim) cls.push('ansi-dim');
  if (s.italic) cls.push('ansi-italic');
  if (s.underline) cls.push('ansi-underline');
  if (s.strike) cls.push('ansi-strike');
  if (cls.length) el.className = cls.join(' ');
  return el;
}
