// rlsched dashboard: boot, sign-in state, the client-side router and the
// top bar. Pages are modules exporting mount(root, ctx) → cleanup.

import { api, session, ApiError } from './api.js';
import { live } from './live.js';
import { h, replace, safeNext, toast } from './util.js';
import * as loginPage from './pages/login.js';
import * as runsPage from './pages/runs.js';
import * as runPage from './pages/run.js';
import * as submitPage from './pages/submit.js';
import * as comparePage from './pages/compare.js';
import * as workersPage from './pages/workers.js';
import * as queuePage from './pages/queue.js';
import * as healthPage from './pages/health.js';
import * as usersPage from './pages/users.js';
import * as sweepsPage from './pages/sweeps.js';
import * as sweepPage from './pages/sweep.js';
import * as pipelinePage from './pages/pipeline.js';
import * as settingsPage from './pages/settings.js';

const routes = [
  { re: /^\/login$/, page: loginPage, nav: '', public: true, title: 'Sign in' },
  { re: /^\/(runs)?$/, page: runsPage, nav: 'runs', title: 'Runs' },
  { re: /^\/runs\/([A-Za-z0-9_-]{1,64})$/, page: runPage, nav: 'runs', title: 'Run', keys: ['id'] },
  { re: /^\/sweeps$/, page: sweepsPage, nav: 'sweeps', title: 'Sweeps' },
  { re: /^\/sweeps\/([A-Za-z0-9_-]{1,64})$/, page: sweepPage, nav: 'sweeps', title: 'Sweep', keys: ['id'] },
  { re: /^\/pipelines\/([A-Za-z0-9_-]{1,64})$/, page: pipelinePage, nav: 'runs', title: 'Pipeline', keys: ['id'] },
  { re: /^\/submit$/, page: submitPage, nav: 'submit', title: 'New run' },
  { re: /^\/compare$/, page: comparePage, nav: 'compare', title: 'Compare' },
  { re: /^\/workers$/, page: workersPage, nav: 'workers', title: 'Workers' },
  { re: /^\/queue$/, page: queuePage, nav: 'queue', title: 'Queue' },
  { re: /^\/health$/, page: healthPage, nav: 'health', title: 'Health' },
  { re: /^\/users$/, page: usersPage, nav: 'users', title: 'Users' },
  { re: /^\/settings$/, page: settingsPage, nav: 'settings', title: 'Settings' },
];

const state = {
  user: null,
  cleanup: null,
  token: 0, // bumps per navigation, so a slow page does not mount over a newer one
};

const main = document.getElementById('main');
const topbar = document.getElementById('topbar');

// navigate moves within the app. It never leaves this origin: a URL of
// another one (a '//host' path that slipped through, say) goes to /runs, so
// no in-app link or redirect can be turned into an open redirect.
export function navigate(url, { replace: rep = false } = {}) {
  let u = new URL(url, location.href);
  if (u.origin !== location.origin || u.pathname.startsWith('//')) u = new URL('/runs', location.origin);
  if (rep) history.replaceState(null, '', u.pathname + u.search + u.hash);
  else history.pushState(null, '', u.pathname + u.search + u.hash);
  render();
}

function setTitle(t) {
  document.title = t ? t + ' · rlsched' : 'rlsched';
}

function showChrome(on) {
  topbar.hidden = !on;
  if (!on) return;
  const users = topbar.querySelector('[data-nav="users"]');
  if (users) users.hidden = !(state.user && state.user.role === 'ADMIN');
  const who = document.getElementById('whoami');
  replace(who, state.user ? [h('a', { href: '/settings', title: 'Your password, a token for scripts, notifications' }, state.user.username), state.user.role === 'ADMIN' ? h('span', { class: 'role' }, 'admin') : null] : '');
}

function markNav(nav) {
  for (const a of topbar.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

async function ensureUser() {
  if (state.user) return state.user;
  if (!session.hinted) return null;
  try {
    state.user = await api.me();
    return state.user;
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      session.hinted = false;
      return null;
    }
    throw e;
  }
}

async function render() {
  const my = ++state.token;
  if (state.cleanup) {
    try { state.cleanup(); } catch (e) { console.warn('rlsched: page cleanup failed', e); }
    state.cleanup = null;
  }
  const path = location.pathname.replace(/\/+$/, '') || '/';
  let route = null, m = null;
  for (const r of routes) {
    m = path.match(r.re);
    if (m) { route = r; break; }
  }
  let user = null;
  try {
    user = await ensureUser();
  } catch (e) {
    replace(main, h('div', { class: 'notice error' }, 'Cannot reach the server: ' + e.message + ' ', h('a', { href: location.pathname + location.search }, 'Retry')));
    return;
  }
  if (my !== state.token) return;
  if (!route) { // with the nav for a signed-in reader, opened fresh too
    showChrome(!!user);
    markNav('');
    setTitle('Page not found');
    replace(main, h('div', { class: 'empty' }, h('strong', null, 'Page not found'), h('a', { href: '/runs' }, 'Go to the runs')));
    return;
  }
  if (!route.public && !user) {
    const next = location.pathname + location.search;
    navigate('/login' + (next && next !== '/' ? '?next=' + encodeURIComponent(next) : ''), { replace: true });
    return;
  }
  if (route.public && user && route.page === loginPage) {
    navigate(safeNext(new URLSearchParams(location.search).get('next')), { replace: true });
    return;
  }
  if (user) live.start();
  showChrome(!!user && !route.public);
  markNav(route.nav);
  setTitle(route.title);
  const params = {};
  (route.keys || []).forEach((k, i) => { params[k] = decodeURIComponent(m[i + 1]); });
  replace(main);
  main.scrollTop = 0;
  window.scrollTo(0, 0);
  const ctx = {
    params,
    query: new URLSearchParams(location.search),
    user,
    navigate,
    setTitle,
    signedIn: (u) => { state.user = u; session.hinted = true; },
  };
  try {
    state.cleanup = route.page.mount(main, ctx) || null;
  } catch (e) {
    console.warn('rlsched: page failed', e);
    replace(main, h('div', { class: 'notice error' }, 'This page failed to load: ' + e.message));
  }
}


async function signOut() {
  try { await api.logout(); } catch { /* the cookie goes anyway on the next 401 */ }
  state.user = null;
  session.hinted = false;
  live.stop();
  navigate('/login', { replace: true });
}

// ---- live indicator ----
function showLive(s) {
  const el = document.getElementById('live-indicator');
  if (!el) return;
  el.classList.toggle('live', s === 'open');
  el.classList.toggle('polling', s === 'down');
  const label = el.querySelector('.live-label');
  label.textContent = s === 'open' ? 'Live' : s === 'down' ? 'Polling' : 'Connecting';
  el.title = s === 'open' ? 'Live updates over WebSocket'
    : s === 'down' ? 'Live updates unavailable; refreshing every 2 s' : 'Connecting for live updates';
}

// ---- wiring ----
document.addEventListener('click', (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest('a[href]');
  if (!a || a.target || a.hasAttribute('download')) return;
  const u = new URL(a.href, location.href);
  if (u.origin !== location.origin || u.pathname.startsWith('/api/') || u.pathname.startsWith('/static/')) return;
  e.preventDefault();
  if (u.pathname + u.search === location.pathname + location.search && !u.hash) return;
  navigate(u.pathname + u.search + u.hash);
});

window.addEventListener('popstate', render);
window.addEventListener('rl:unauthorized', () => {
  if (!state.user) return;
  state.user = null;
  session.hinted = false;
  live.stop();
  toast('Your session ended; sign in again.', 'error');
  const next = location.pathname + location.search;
  navigate('/login?next=' + encodeURIComponent(next), { replace: true });
});
document.getElementById('signout').addEventListener('click', signOut);
live.onState(showLive);
showLive(live.state);

// Keyboard: g then r/s/c/w/h/n jumps to a page; "/" focuses the page's filter.
let gPending = 0;
document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (e.metaKey || e.ctrlKey || e.altKey || (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)))) return;
  if (!state.user) return;
  if (gPending && Date.now() - gPending < 1200) {
    gPending = 0;
    const to = { r: '/runs', s: '/sweeps', c: '/compare', w: '/workers', h: '/health', n: '/submit' }[e.key];
    if (to) { e.preventDefault(); navigate(to); }
    return;
  }
  if (e.key === 'g') { gPending = Date.now(); return; }
  if (e.key === '/') {
    const f = main.querySelector('[data-shortcut="filter"]');
    if (f) { e.preventDefault(); f.focus(); }
  }
});

render();
