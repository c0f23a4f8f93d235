// Small DOM and formatting helpers. Text always goes in as text nodes, never
// as HTML, so run names, logs and params cannot inject markup.

// h builds an element: h('a', {href: '/x', class: 'y', onclick: f}, 'text', child...).
// Attributes: class, dataset (object), style (object), on<event> (function),
// booleans (true sets, false/null/undefined skips), anything else as an attribute.
export function h(tag, attrs, ...children) {
  const el = tag.startsWith('svg:')
    ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4))
    : document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k === 'style') Object.assign(el.style, v);
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'value' && 'value' in el && !tag.startsWith('svg:')) el.value = v;
      else if ((k === 'checked' || k === 'selected' || k === 'disabled') && k in el) el[k] = !!v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

export const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT']);
export const STATUSES = ['QUEUED', 'DISPATCHED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'LOST'];

export function badge(status, extra) {
  return h('span', { class: ['badge', 'st-' + status, extra], dataset: { status } }, status);
}

export function parseTime(s) {
  if (!s) return null;
  const t = Date.parse(s);
  return Number.isFinite(t) && t > 0 ? t : null;
}

export function fmtDuration(ms) {
  if (ms == null || !Number.isFinite(ms)) return '';
  if (ms < 0) ms = 0;
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + String(s % 60).padStart(2, '0') + 's';
  const hr = Math.floor(m / 60);
  if (hr < 48) return hr + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(hr / 24) + 'd ' + (hr % 24) + 'h';
}

export function fmtAge(t, now = Date.now()) {
  if (t == null) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 5) return 'just now';
  if (s < 60) return s + 's ago';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ago';
  const hr = Math.floor(m / 60);
  if (hr < 48) return hr + 'h ago';
  return Math.floor(hr / 24) + 'd ago';
}

export function fmtTime(t) {
  if (t == null) return '';
  const d = new Date(t);
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  if (d.toDateString() === today.toDateString()) return time;
  return d.toLocaleDateString([], { year: 'numeric', month: 'short', day: 'numeric' }) + ' ' + time;
}

export function fmtNum(x, digits = 4) {
  if (x == null || !Number.isFinite(x)) return '';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e6 || a < 1e-3) return x.toExponential(2);
  if (Number.isInteger(x)) return x.toLocaleString('en-US');
  return Number(x.toPrecision(digits)).toLocaleString('en-US', { maximumFractionDigits: 6 });
}

export function fmtBytes(n) {
  if (n == null || !Number.isFinite(n)) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + ' ' + u[i];
}

// runDuration is how long a run has run (or ran), in ms; null before it started.
export function runDuration(t, now = Date.now()) {
  const s = parseTime(t.startedAt);
  if (s == null) return null;
  const f = parseTime(t.finishedAt);
  return (f ?? (TERMINAL.has(t.status) ? s : now)) - s;
}

// shellQuote renders argv as a POSIX shell command line.
export function shellQuote(argv) {
  return (argv || []).map((a) => (a !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : "'" + a.replace(/'/g, `'"'"'`) + "'")).join(' ');
}

// parseArgv splits a command line like a POSIX shell would (quotes and
// backslashes; no expansion). It returns {argv} or {error}.
export function parseArgv(s) {
  const argv = [];
  let cur = '', inWord = false, i = 0;
  while (i < s.length) {
    const c = s[i];
    if (c === "'") {
      const j = s.indexOf("'", i + 1);
      if (j < 0) return { error: 'unterminated single quote' };
      cur += s.slice(i + 1, j); inWord = true; i = j + 1; continue;
    }
    if (c === '"') {
      i++; inWord = true;
      let closed = false;
      while (i < s.length) {
        const d = s[i];
        if (d === '"') { closed = true; i++; break; }
        if (d === '\\' && i + 1 < s.length && '"\\$`\n'.includes(s[i + 1])) { cur += s[i + 1]; i += 2; continue; }
        cur += d; i++;
      }
      if (!closed) return { error: 'unterminated double quote' };
      continue;
    }
    if (c === '\\') {
      if (i + 1 < s.length) { cur += s[i + 1]; inWord = true; i += 2; continue; }
      return { error: 'trailing backslash' };
    }
    if (/\s/.test(c)) {
      if (inWord) { argv.push(cur); cur = ''; inWord = false; }
      i++; continue;
    }
    cur += c; inWord = true; i++;
  }
  if (inWord) argv.push(cur);
  return { argv };
}

// sessionURL is where an interactive run's web app is served (issue 34;
// the master proxies it for its owner), '' for a run without one.
export function sessionURL(t) {
  return t && t.kind === 'interactive' && t.env && t.env.RLSCHED_PORT ? '/sessions/' + encodeURIComponent(t.id) + '/' : '';
}

export function debounce(fn, ms) {
  let t = 0;
  const d = (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
  d.cancel = () => clearTimeout(t);
  return d;
}

// Series colours: distinguishable, readable on light and dark.
// RESUME_METRIC is the master's series of where each attempt ≥ 2 resumed
// (core.MetricResume): marks on a run's charts, never a chart of its own.
export const RESUME_METRIC = 'rlsched/resume';

export const PALETTE = ['#4f7cff', '#f0642e', '#1fa37a', '#c03fd1', '#e2a400', '#0aa5c2', '#e23d6d', '#6b8e23', '#8b5cf6', '#8d6e63'];

export function paramsOf(t) {
  const p = t && t.params;
  return p && typeof p === 'object' && !Array.isArray(p) ? p : {};
}

export function paramText(v) {
  if (v === undefined) return '';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

// paramShort is a param as tables and labels show it: a number to 4
// significant digits (a random sweep's lr=0.00021056337053284956 reads
// 0.0002106); the record, and a cell's title, keep it whole (issue 32).
export function paramShort(v) {
  return typeof v === 'number' && Number.isFinite(v) ? String(Number(v.toPrecision(4))) : paramText(v);
}

// varyingKeys are the keys whose values differ among the objects (a key
// some lack counts as differing), sorted; constant are the others.
export function varyingKeys(objs) {
  const all = new Set();
  for (const o of objs) for (const k of Object.keys(o)) all.add(k);
  const varying = [], constant = [];
  for (const k of [...all].sort()) {
    const vals = new Set(objs.map((o) => (k in o ? JSON.stringify(o[k]) : '\u0000absent')));
    (vals.size > 1 ? varying : constant).push(k);
  }
  return { varying, constant };
}

// paramsLabel writes the params keys of p as "lr=0.001 gamma=0.99".
export function paramsLabel(p, keys) {
  return keys.filter((k) => k in p).map((k) => k + '=' + paramShort(p[k])).join(' ');
}

// statusCounts is one small badge per status present in counts, in the
// order of STATUSES, each with its count.
export function statusCounts(counts) {
  const out = [];
  for (const st of STATUSES) {
    const n = counts && counts[st];
    if (n) out.push(h('span', { class: ['badge', 'st-' + st, 'count-badge'], dataset: { status: st }, title: n + ' ' + st }, String(n)));
  }
  return out.length ? out : h('span', { class: 'faint' }, '—');
}

// safeNext is where a sign-in may return to: a path of this site, given as
// ?next=. Anything else is /runs: a path must start with exactly one '/'
// followed by neither '/' nor '\' (browsers read '/\host' as '//host'),
// and hold no control character or backslash, before or after decoding
// (the URL parser drops tabs and newlines, so '/%09/host' is '//host'); and
// resolved against this page it must stay on this origin, and its resolved
// path must pass the same test: dot segments resolve '/.//host' and
// '/a/..//host' to the path '//host', which navigating to would read as
// another host.
export function safeNext(n) {
  const fallback = '/runs';
  if (typeof n !== 'string' || n === '') return fallback;
  let d;
  try { d = decodeURIComponent(n); } catch { return fallback; }
  const bad = (s) => !/^\/(?![\/\\])/.test(s) || /[\u0000-\u001f\u007f-\u009f\\]/.test(s);
  if (bad(n) || bad(d)) return fallback;
  let u;
  try { u = new URL(n, location.origin); } catch { return fallback; }
  if (u.origin !== location.origin || bad(u.pathname) || u.pathname.startsWith('/login')) return fallback;
  return u.pathname + u.search + u.hash;
}

// isOwnerOrAdmin: may user cancel run t?
export function mayCancel(user, t) {
  return !!user && (user.role === 'ADMIN' || user.id === t.userId);
}

export function copyButton(getText, label = 'Copy') {
  const b = h('button', { type: 'button', class: 'btn btn-ghost btn-sm', title: 'Copy to clipboard' }, label);
  b.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(getText());
      b.textContent = 'Copied';
    } catch {
      b.textContent = 'Select and copy';
    }
    setTimeout(() => { b.textContent = label; }, 1500);
  });
  return b;
}

let toastRoot = null;
export function toast(msg, kind = '') {
  toastRoot ??= document.getElementById('toasts');
  if (!toastRoot) return;
  const el = h('div', { class: ['toast', kind] }, msg);
  toastRoot.appendChild(el);
  setTimeout(() => el.remove(), kind === 'error' ? 7000 : 3500);
}

// Compact GPU/worker description of a run.
export function placement(t) {
  const parts = [];
  if (t.gpus > 0) parts.push(t.gpus + ' GPU' + (t.gpus === 1 ? '' : 's'));
  else parts.push('CPU');
  if (t.worker) {
    let w = t.worker;
    if (t.gpuIndices && t.gpuIndices.length) w += ' [' + t.gpuIndices.join(',') + ']';
    parts.push(w);
  }
  return parts.join(' · ');
}

// keyed makes container's children one element per item, in order,
// rebuilding an item's element only when sigOf(item) changed. Focus inside
// a rebuilt element moves to its counterpart (same data-fk) in the new one,
// so live refreshes do not throw a keyboard user out of the list.
export function keyed(container, items, keyOf, sigOf, build) {
  const cache = container._keyed || (container._keyed = new Map());
  const next = new Map();
  const active = document.activeElement;
  let refocus = null;
  const els = items.map((it) => {
    const k = keyOf(it);
    const sig = sigOf(it);
    const c = cache.get(k);
    if (c && c.sig === sig) {
      next.set(k, c);
      return c.el;
    }
    const el = build(it, c ? c.item : null);
    if (c && active && c.el.contains(active)) {
      const fk = active.closest('[data-fk]');
      refocus = fk ? () => { const t = el.querySelector(`[data-fk="${CSS.escape(fk.dataset.fk)}"]`); if (t) t.focus(); } : null;
    }
    next.set(k, { sig, el, item: it });
    return el;
  });
  const keep = new Set(els);
  for (const child of Array.from(container.children)) if (!keep.has(child)) child.remove();
  els.forEach((el, i) => {
    if (container.children[i] !== el) container.insertBefore(el, container.children[i] || null);
  });
  container._keyed = next;
  if (refocus) refocus();
}
