// theme.js: a classic script run before the page is drawn, so that a chosen
// theme shows from the first paint. It reads the theme this browser
// remembers (localStorage capstan.theme: light or dark; anything else
// follows the system's prefers-color-scheme) onto <html data-theme>.
// prefs.js changes it afterwards.
(function () {
  try {
    var t = localStorage.getItem('capstan.theme');
    if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
  } catch (e) { /* storage disabled: follow the system */ }
})();
