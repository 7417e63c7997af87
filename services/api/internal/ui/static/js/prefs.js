// prefs.js: what a person prefers, remembered by this browser
// (localStorage), unlike a view's state, which lives in its URL: the theme
// (system, light or dark) and how times read (local, UTC, or relative to
// now). A change fires `capstan:prefs` on window; pages draw again on it.

const THEME = 'capstan.theme';
const TIMES = 'capstan.times';

const THEMES = ['auto', 'light', 'dark'];
const TIME_MODES = ['local', 'utc', 'relative'];

function stored(key, allowed) {
  try {
    const v = localStorage.getItem(key);
    return allowed.includes(v) ? v : allowed[0];
  } catch (e) { return allowed[0]; }
}

function remember(key, value) {
  try { localStorage.setItem(key, value); } catch (e) { /* storage disabled: this tab only */ }
}

// timeMode is local, utc or relative.
export let timeMode = stored(TIMES, TIME_MODES);

// theme is auto (the system's prefers-color-scheme), light or dark.
export let theme = stored(THEME, THEMES);

function applyTheme() {
  if (theme === 'auto') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

// onPrefs calls fn after each change of a preference; it returns the
// function that stops it.
export function onPrefs(fn) {
  window.addEventListener('capstan:prefs', fn);
  return () => window.removeEventListener('capstan:prefs', fn);
}

// initPrefs wires the header's theme and times selects.
export function initPrefs(themeSelect, timesSelect) {
  applyTheme();
  themeSelect.value = theme;
  timesSelect.value = timeMode;
  themeSelect.addEventListener('change', () => {
    theme = THEMES.includes(themeSelect.value) ? themeSelect.value : 'auto';
    remember(THEME, theme);
    applyTheme();
    window.dispatchEvent(new Event('capstan:prefs'));
  });
  timesSelect.addEventListener('change', () => {
    timeMode = TIME_MODES.includes(timesSelect.value) ? timesSelect.value : 'local';
    remember(TIMES, timeMode);
    window.dispatchEvent(new Event('capstan:prefs'));
  });
}
