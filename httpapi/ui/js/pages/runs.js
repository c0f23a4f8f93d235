// Runs: a live table (WebSocket /topic/tasks, else polling), filters by
// status, user, project, name, tag, sweep, params and creation date kept in
// the URL (and in the CSV export), queue position and reason for QUEUED
// runs, chosen param columns, and a selection for Compare. The operators'
// health cards are on the Health page, not here.

import { api } from '../api.js';
import { live, poller } from '../live.js';
import { h, replace, keyed, badge, fmtAge, fmtDuration, fmtNum, parseTime, runDuration, placement, debounce, sessionURL, paramsOf, paramText, paramShort, STATUSES, TERMINAL } from '../util.js';

const PAGE = 50;
const SEL_KEY = 'rlsched.compare';
const COLS_KEY = 'rlsched.runs.columns';
const MAX_COLS = 8;
const MCOLS_KEY = 'rlsched.runs.metrics';
const MAX_MCOLS = 4;
const PARAM_RE = /^[A-Za-z0-9_.\-]{1,64}$/;
const METRIC_RE = /^[A-Za-z0-9_.\-/]{1,128}$/;

// loadColumns are the param keys (metric names) the reader chose to see
// as columns, kept in this browser.
function loadColumns(key = COLS_KEY, max = MAX_COLS, re = PARAM_RE) {
  try { return parseColumns(localStorage.getItem(key) || '', max, re); } catch { return []; }
}
function parseColumns(text, max = MAX_COLS, re = PARAM_RE) {
  return [...new Set(text.split(/[\s,]+/).filter((k) => re.test(k)))].slice(0, max);
}

// The Runs list's curve column: each run's episode_reward, thinned by the
// server (GET /api/sparklines); a running run's is read again every 10 s.
const SPARK_METRIC = 'episode_reward';
const SPARK_STALE_MS = 10000;

function sparkline(pts) {
  if (!pts || pts.length < 2) return h('span', { class: 'faint' }, '—');
  const W = 90, H = 22;
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const [x, y] of pts) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  const sx = (x) => (x1 > x0 ? ((x - x0) / (x1 - x0)) * (W - 2) + 1 : W / 2);
  const sy = (y) => (y1 > y0 ? H - 1 - ((y - y0) / (y1 - y0)) * (H - 2) : H / 2);
  const d = pts.map(([x, y], i) => (i ? 'L' : 'M') + sx(x).toFixed(1) + ' ' + sy(y).toFixed(1)).join(' ');
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('width', String(W));
  svg.setAttribute('height', String(H));
  svg.setAttribute('class', 'spark');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `${SPARK_METRIC} from ${fmtNum(pts[0][1])} to ${fmtNum(pts[pts.length - 1][1])}`);
  const path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
  path.setAttribute('d', d);
  path.dataset.points = String(pts.length);
  svg.appendChild(path);
  return svg;
}

// sweepTag is a sweep's tag, shortened: the full id is in its title.
function sweepTag(id) {
  return 'sweep ' + (id.length > 8 ? '…' + id.slice(-6) : id);
}

export function loadSelection() {
  try { return new Set(JSON.parse(sessionStorage.getItem(SEL_KEY) || '[]')); } catch { return new Set(); }
}
export function saveSelection(sel) {
  try { sessionStorage.setItem(SEL_KEY, JSON.stringify([...sel])); } catch { /* private mode */ }
}

export function mount(root, ctx) {
  const q = ctx.query;
  const f = {
    status: (q.get('status') || '').toUpperCase(), user: q.get('user') || '', project: q.get('project') || '',
    name: q.get('name') || '', tag: q.get('tag') || '', sweep: q.get('sweep') || '', rerunOf: q.get('rerunOf') || '',
    params: paramsFromQuery(q), after: q.get('after') || '', before: q.get('before') || '',
    note: q.get('note') || '', baseline: q.get('isBaseline') === 'true',
  };
  if (!STATUSES.includes(f.status)) f.status = '';
  let items = [];          // tasks shown, newest first
  const byId = new Map();
  let cursor = '';
  let loading = false;
  let loadError = null;
  const selection = loadSelection();
  const users = new Set([ctx.user.username]);
  const projects = new Set();
  const ac = new AbortController();
  let gen = 0;

  // ---- header and filters ----
  const chips = h('div', { class: 'chips', role: 'group', 'aria-label': 'Filter by status' });
  for (const s of ['', ...STATUSES]) {
    const c = h('button', { type: 'button', class: 'chip', 'aria-pressed': String(f.status === s), dataset: { status: s || 'ALL' } }, s ? s[0] + s.slice(1).toLowerCase() : 'All');
    c.addEventListener('click', () => { f.status = s; syncChips(); applyFilters(); });
    chips.appendChild(c);
  }
  function syncChips() {
    for (const c of chips.children) c.setAttribute('aria-pressed', String((c.dataset.status === 'ALL' ? '' : c.dataset.status) === f.status));
  }
  const userDL = h('datalist', { id: 'users-dl' });
  const projDL = h('datalist', { id: 'projects-dl' });
  const userIn = h('input', { type: 'search', id: 'filter-user', placeholder: 'any user', value: f.user, list: 'users-dl', 'data-shortcut': 'filter', autocomplete: 'off' });
  const projIn = h('input', { type: 'search', id: 'filter-project', placeholder: 'any project', value: f.project, list: 'projects-dl', autocomplete: 'off' });
  const mine = h('button', { type: 'button', class: 'chip', 'aria-pressed': String(f.user === ctx.user.username) }, 'Mine');
  mine.addEventListener('click', () => {
    f.user = f.user === ctx.user.username ? '' : ctx.user.username;
    userIn.value = f.user;
    applyFilters();
  });
  const nameIn = h('input', { type: 'search', id: 'filter-name', placeholder: 'part of a name', value: f.name, autocomplete: 'off' });
  const tagIn = h('input', { type: 'search', id: 'filter-tag', placeholder: 'a tag', value: f.tag, autocomplete: 'off' });
  const noteIn = h('input', { type: 'search', id: 'filter-note', placeholder: 'part of a note', value: f.note, autocomplete: 'off' });
  const baselineCb = h('input', { type: 'checkbox', id: 'filter-baseline', checked: f.baseline });
  baselineCb.addEventListener('change', () => { f.baseline = baselineCb.checked; applyFilters(); });
  const sweepIn = h('input', { type: 'search', id: 'filter-sweep', placeholder: 'a sweep id', value: f.sweep, autocomplete: 'off' });
  const paramIn = h('input', { type: 'search', id: 'filter-param', placeholder: 'lr=0.001 seed=3', value: paramsText(f.params), autocomplete: 'off' });
  const afterIn = h('input', { type: 'date', id: 'filter-after', value: f.after });
  const beforeIn = h('input', { type: 'date', id: 'filter-before', value: f.before });
  const paramErr = h('span', { class: 'err', id: 'filter-param-err' });
  const onText = debounce(() => {
    f.user = userIn.value.trim(); f.project = projIn.value.trim(); f.name = nameIn.value.trim(); f.tag = tagIn.value.trim();
    f.sweep = sweepIn.value.trim(); f.note = noteIn.value.trim(); f.after = afterIn.value; f.before = beforeIn.value;
    const ps = parseParamFilters(paramIn.value);
    paramErr.textContent = ps.error || '';
    if (!ps.error) f.params = ps.params;
    applyFilters();
  }, 300);
  for (const el of [userIn, projIn, nameIn, tagIn, noteIn, sweepIn, paramIn]) el.addEventListener('input', onText);
  for (const el of [afterIn, beforeIn]) el.addEventListener('change', onText);
  const csvLink = h('a', { class: 'btn btn-sm', id: 'runs-csv', download: 'runs.csv', title: 'The runs of these filters as CSV, a column per param' }, 'Export CSV');
  const moreSet = () => !!(f.tag || f.note || f.baseline || f.sweep || f.params.length || f.after || f.before || f.rerunOf);
  // Param columns: keys the reader picks (seen ones offered), kept in this
  // browser.
  let columns = loadColumns();
  // Metric columns: the last value of each metric named, from the same
  // thinned series as the curves (their last point is the run's last).
  let metricCols = loadColumns(MCOLS_KEY, MAX_MCOLS, METRIC_RE);
  const mcolsIn = h('input', { type: 'search', id: 'runs-metric-columns', placeholder: 'loss eval/return', value: metricCols.join(' '), autocomplete: 'off' });
  mcolsIn.addEventListener('input', debounce(() => {
    metricCols = parseColumns(mcolsIn.value, MAX_MCOLS, METRIC_RE);
    try { localStorage.setItem(MCOLS_KEY, metricCols.join(' ')); } catch { /* private mode */ }
    renderHead();
    renderRows();
  }, 300));
  const paramKeys = new Set();
  const keysDL = h('datalist', { id: 'param-keys-dl' });
  const colsIn = h('input', { type: 'search', id: 'runs-columns', placeholder: 'lr gamma seed', value: columns.join(' '), list: 'param-keys-dl', autocomplete: 'off' });
  colsIn.addEventListener('input', debounce(() => {
    columns = parseColumns(colsIn.value);
    try { localStorage.setItem(COLS_KEY, columns.join(' ')); } catch { /* private mode */ }
    renderHead();
    renderRows();
  }, 300));
  const more2 = h('details', { class: 'more filters-more', open: moreSet() },
    h('summary', null, 'More filters'),
    h('div', { class: 'filters' },
      h('div', { class: 'field' }, h('label', { for: 'filter-tag' }, 'Tag'), tagIn),
      h('div', { class: 'field' }, h('label', { for: 'filter-note' }, 'Note'), noteIn),
      h('label', { class: 'toggle', for: 'filter-baseline' }, baselineCb, h('span', null, 'Baselines only')),
      h('div', { class: 'field' }, h('label', { for: 'filter-sweep' }, 'Sweep'), sweepIn),
      h('div', { class: 'field' }, h('label', { for: 'filter-param', title: 'Params equal as JSON values: lr=0.001 matches 1e-3' }, 'Params'), paramIn, paramErr),
      h('div', { class: 'field' }, h('label', { for: 'filter-after' }, 'Created from'), afterIn),
      h('div', { class: 'field' }, h('label', { for: 'filter-before' }, 'to'), beforeIn),
      h('div', { class: 'field' }, h('label', { for: 'runs-columns', title: 'Param keys to show as columns, up to ' + MAX_COLS }, 'Param columns'), colsIn, keysDL),
      h('div', { class: 'field' }, h('label', { for: 'runs-metric-columns', title: 'Metrics to show the last value of, up to ' + MAX_MCOLS }, 'Metric columns'), mcolsIn)));

  // Grouping: the shown runs under a header per sweep or project, each
  // group collapsible; kept in the URL (?group=sweep|project).
  let groupBy = ['sweep', 'project'].includes(q.get('group')) ? q.get('group') : '';
  const collapsed = new Set();
  const groupSel = h('select', { id: 'runs-group', 'aria-label': 'Group runs by' },
    h('option', { value: '' }, 'No grouping'), h('option', { value: 'sweep' }, 'By sweep'), h('option', { value: 'project' }, 'By project'));
  groupSel.value = groupBy;
  groupSel.addEventListener('change', () => { groupBy = groupSel.value; collapsed.clear(); applyFilters(); });
  const filters = h('div', { class: 'filters' },
    chips,
    h('div', { class: 'field' }, h('label', { for: 'filter-user' }, 'User'), userIn, userDL),
    mine,
    h('div', { class: 'field' }, h('label', { for: 'filter-project' }, 'Project'), projIn, projDL),
    h('div', { class: 'field' }, h('label', { for: 'filter-name' }, 'Name'), nameIn),
    h('div', { class: 'field' }, h('label', { for: 'runs-group' }, 'Group'), groupSel),
    h('span', { style: { flex: '1' } }),
    csvLink,
  );

  // ---- table ----
  const tbody = h('tbody');
  const selAll = h('input', { type: 'checkbox', 'aria-label': 'Select all shown runs' });
  selAll.addEventListener('change', () => {
    for (const t of items) if (selAll.checked) selection.add(t.id); else selection.delete(t.id);
    saveSelection(selection);
    renderRows();
  });
  const thead = h('thead');
  function renderHead() {
    replace(thead, h('tr', null,
      h('th', { class: 'sel' }, selAll),
      h('th', { class: 'hide-sm' }, 'Status'), h('th', null, 'Name'),
      columns.map((k) => h('th', { class: 'hide-sm param-col', dataset: { param: k } }, k)),
      metricCols.map((m) => h('th', { class: 'num hide-sm metric-col', dataset: { metric: m } }, m)),
      h('th', { class: 'hide-sm' }, 'User'), h('th', { class: 'hide-sm' }, 'Project'),
      h('th', { class: 'hide-sm' }, 'GPUs · worker'), h('th', { class: 'num hide-sm' }, 'Attempt'), h('th', { class: 'hide-sm' }, 'Age'),
      h('th', { class: 'num hide-sm' }, 'Duration'), h('th', { class: 'num' }, 'Final reward'), h('th', { class: 'hide-sm' }, 'Reward curve')));
  }
  renderHead();
  const table = h('table', { class: 'data', id: 'runs-table' }, thead, tbody);
  const empty = h('div', { class: 'empty', hidden: true });
  // Rows of grey bars while the first page is read, so a slow first load
  // looks like the table it will be, not like an empty list.
  const skeleton = h('div', { class: 'skeleton', id: 'runs-skeleton', hidden: true, 'aria-busy': 'true', 'aria-label': 'Loading runs' },
    [0, 1, 2, 3, 4].map(() => h('div', { class: 'skeleton-row' }, h('span'), h('span'), h('span'))));
  const more = h('button', { type: 'button', class: 'btn btn-sm', hidden: true }, 'Load more');
  more.addEventListener('click', () => load(true));
  const footInfo = h('span', { class: 'faint' });
  const keysHint = h('span', { class: 'faint hide-sm', style: { marginLeft: 'auto' } }, 'Keys: j/k move · x select · / filter · g then r, s, n, c, w, h to switch pages');
  const errBox = h('div', { class: 'notice error', role: 'alert', hidden: true });

  const selCount = h('span');
  const compareBtn = h('button', { type: 'button', class: 'btn btn-primary btn-sm', id: 'compare-selected' }, 'Compare');
  compareBtn.addEventListener('click', () => ctx.navigate('/compare?ids=' + [...selection].join(',')));
  const clearSel = h('button', { type: 'button', class: 'btn btn-ghost btn-sm' }, 'Clear');
  clearSel.addEventListener('click', () => { selection.clear(); saveSelection(selection); renderRows(); });
  const selBar = h('div', { class: 'selection-bar', hidden: true, role: 'region', 'aria-label': 'Selected runs' }, selCount, h('span', { style: { flex: '1' } }), clearSel, compareBtn);

  // Your sessions (issue 34): the interactive runs of the signed-in user
  // that are queued or running, with their terminal and web app.
  const sessionsBox = h('section', { class: 'card sessions', id: 'sessions', 'aria-label': 'Your sessions', hidden: true });
  let sessionsGen = 0;
  const refreshSessions = debounce(async () => {
    const g = ++sessionsGen;
    try {
      const [run, queued] = await Promise.all(['RUNNING', 'QUEUED'].map((status) =>
        api.tasks({ user: ctx.user.username, status, limit: 100 }, ac.signal)));
      if (g !== sessionsGen) return;
      const list = [...(run.items || []), ...(queued.items || [])].filter((t) => t.kind === 'interactive');
      renderSessions(list);
    } catch (e) {
      if (e.name !== 'AbortError') sessionsBox.hidden = true;
    }
  }, 300);
  function renderSessions(list) {
    sessionsBox.hidden = list.length === 0;
    if (!list.length) return;
    replace(sessionsBox, h('div', { class: 'card-head' }, h('h2', null, 'Your sessions')),
      h('ul', { class: 'session-list' }, list.map((t) => h('li', { dataset: { id: t.id } },
        badge(t.status), ' ',
        h('a', { href: '/runs/' + t.id }, t.name || t.id), ' ', h('span', { class: 'mono faint' }, t.id),
        h('span', { class: 'spacer' }),
        h('span', { class: 'btn-row' },
          t.status === 'RUNNING' ? h('a', { class: 'btn btn-sm', href: '/runs/' + t.id + '#terminal', dataset: { act: 'attach' } }, 'Attach') : null,
          t.status === 'RUNNING' && sessionURL(t) ? h('a', { class: 'btn btn-sm btn-primary', href: sessionURL(t), target: '_blank', rel: 'noopener', dataset: { act: 'open' } }, 'Open app') : null)))));
  }

  replace(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Runs')),
    sessionsBox,
    filters,
    more2,
    errBox,
    h('div', { class: 'table-wrap' }, table, skeleton, empty),
    h('div', { class: 'table-foot' }, more, footInfo, keysHint),
    selBar);

  // ---- rows ----
  // matches is the server's filter, for runs that arrive live.
  function matches(t) {
    const created = parseTime(t.createdAt);
    const { after, before } = dayRange(f);
    return (!f.status || t.status === f.status) && (!f.user || t.user === f.user) && (!f.project || t.project === f.project) &&
      (!f.name || (t.name || '').toLowerCase().includes(f.name.toLowerCase())) && (!f.tag || (t.tags || []).includes(f.tag)) &&
      (!f.note || (t.note || '').toLowerCase().includes(f.note.toLowerCase())) && (!f.baseline || t.baseline) &&
      (!f.sweep || t.sweepId === f.sweep) && (!f.rerunOf || t.rerunOf === f.rerunOf) &&
      f.params.every(([k, v]) => paramEquals(paramsOf(t)[k], v)) &&
      (!after || (created != null && created >= Date.parse(after))) && (!before || (created != null && created < Date.parse(before)));
  }

  // query is the API's query of the filters.
  function query() {
    const { after, before } = dayRange(f);
    const q = { status: f.status, user: f.user, project: f.project, name: f.name, tag: f.tag, note: f.note, sweep: f.sweep, rerunOf: f.rerunOf,
      isBaseline: f.baseline ? 'true' : '', createdAfter: after, createdBefore: before };
    for (const [k, v] of f.params) q['param.' + k] = v;
    return q;
  }

  const fresh = new Set(); // ids that arrived live, to flash once

  function row(t, prev) {
    const checked = selection.has(t.id);
    const cb = h('input', { type: 'checkbox', 'aria-label': 'Select ' + (t.name || t.id) + ' for comparison', checked, dataset: { fk: 'sel' } });
    cb.addEventListener('change', () => {
      if (cb.checked) selection.add(t.id); else selection.delete(t.id);
      saveSelection(selection);
      renderRows();
    });
    const statusCell = h('td', { class: 'hide-sm' }, badge(t.status));
    if (t.status === 'QUEUED' && (t.queuePosition || t.pendingReason)) {
      statusCell.appendChild(h('div', { class: 'queue-info' },
        t.queuePosition ? h('strong', null, '#' + t.queuePosition + ' in queue') : null,
        t.queuePosition && t.pendingReason ? ' · ' : null,
        t.pendingReason || null));
    } else if (t.error && (t.status === 'FAILED' || t.status === 'LOST' || t.status === 'TIMEOUT')) {
      statusCell.appendChild(h('div', { class: 'queue-info', title: t.error }, t.error.length > 80 ? t.error.slice(0, 80) + '…' : t.error));
    }
    const tags = (t.tags || []).map((x) => (t.sweepId && x === 'sweep:' + t.sweepId
      ? h('a', { class: 'tag', href: '/sweeps/' + t.sweepId, title: 'Its sweep, ' + t.sweepId }, sweepTag(t.sweepId))
      : h('span', { class: 'tag' }, x)));
    const ps = paramsOf(t);
    if (t.baseline) tags.unshift(h('span', { class: 'tag baseline', title: 'Marked as a baseline' }, 'baseline'));
    if (t.kind === 'interactive') {
      tags.unshift(h('span', { class: 'tag interactive', title: 'An interactive session: its owner attaches with rlsched attach ' + t.id }, 'interactive'));
    }
    const flash = prev ? prev.status !== t.status : fresh.delete(t.id);
    const tr = h('tr', { class: [checked && 'selected', flash && 'flash'], dataset: { id: t.id, status: t.status } },
      h('td', { class: 'sel' }, cb),
      statusCell,
      // On a phone the status rides in the name's cell, so the final
      // reward fits beside it.
      h('td', { class: 'name' }, h('span', { class: 'show-sm status-sm' }, badge(t.status)), h('a', { href: '/runs/' + t.id, dataset: { fk: 'name' } }, t.name || t.id),
        t.note ? h('div', { class: 'sub run-note-line', title: t.note }, t.note.length > 120 ? t.note.slice(0, 120) + '…' : t.note) : null,
        h('div', { class: 'sub' }, h('span', { class: 'mono' }, t.id), h('span', { class: 'show-sm' }, ' · ' + t.user), tags.length ? ' ' : null, tags)),
      // A number with 4 significant digits; the record keeps it whole.
      columns.map((k) => h('td', { class: 'hide-sm mono param-col', dataset: { param: k }, title: k in ps ? paramText(ps[k]) : '' },
        !(k in ps) ? h('span', { class: 'faint' }, '—') : paramShort(ps[k]))),
      metricCols.map((m) => {
        const pts = (curve(m, t.id) || {}).pts;
        const last = pts && pts.length ? pts[pts.length - 1] : null;
        return h('td', { class: 'num hide-sm metric-col', dataset: { metric: m }, title: last ? m + ' at step ' + last[0] : '' },
          last ? fmtNum(last[1]) : h('span', { class: 'faint' }, '—'));
      }),
      h('td', { class: 'hide-sm' }, t.user),
      h('td', { class: 'hide-sm' }, t.project || h('span', { class: 'faint' }, '—')),
      h('td', { class: 'hide-sm nowrap' }, placement(t)),
      h('td', { class: 'num hide-sm' }, t.attempt > 1 ? t.attempt + ' / ' + (t.maxRetries + 1) : String(t.attempt || 1)),
      h('td', { class: 'hide-sm nowrap', dataset: { age: t.createdAt || '' }, title: t.createdAt || '' }, fmtAge(parseTime(t.createdAt))),
      h('td', { class: 'num nowrap hide-sm', dataset: { dur: '1' } }, t.startedAt ? fmtDuration(runDuration(t)) : h('span', { class: 'faint' }, '—')),
      h('td', { class: 'num' }, t.finalReward != null ? fmtNum(t.finalReward) : h('span', { class: 'faint' }, '—')),
      h('td', { class: 'hide-sm spark-cell' }, sparkline((curve(SPARK_METRIC, t.id) || {}).pts || null)));
    tr._task = t;
    return tr;
  }

  // groupOf is a run's group under groupBy: its key and its title.
  function groupOf(t) {
    if (groupBy === 'sweep') return t.sweepId ? { key: 's:' + t.sweepId, title: sweepTag(t.sweepId), href: '/sweeps/' + t.sweepId } : { key: 's:', title: 'Not in a sweep' };
    return t.project ? { key: 'p:' + t.project, title: 'project ' + t.project } : { key: 'p:', title: 'No project' };
  }

  // entries are the table's rows: the runs, or under groupBy a header per
  // group (in the order of each group's newest run) and its runs unless
  // it is collapsed.
  function entries() {
    if (!groupBy) return items.map((t) => ({ t }));
    const groups = new Map();
    for (const t of items) {
      const g = groupOf(t);
      if (!groups.has(g.key)) groups.set(g.key, { ...g, runs: [] });
      groups.get(g.key).runs.push(t);
    }
    const out = [];
    for (const g of groups.values()) {
      out.push({ g });
      if (!collapsed.has(g.key)) for (const t of g.runs) out.push({ t });
    }
    return out;
  }

  function groupRow(g) {
    const open = !collapsed.has(g.key);
    const counts = {};
    for (const t of g.runs) counts[t.status] = (counts[t.status] || 0) + 1;
    const toggle = h('button', { type: 'button', class: 'btn btn-ghost btn-sm group-toggle', 'aria-expanded': String(open) }, open ? '▾' : '▸');
    toggle.addEventListener('click', () => { if (open) collapsed.add(g.key); else collapsed.delete(g.key); renderRows(); });
    return h('tr', { class: 'group-head', dataset: { group: g.key } },
      h('td', { class: 'sel' }, toggle),
      h('td', { colspan: '99' }, g.href ? h('a', { href: g.href }, g.title) : h('strong', null, g.title),
        h('span', { class: 'faint' }, ' · ' + g.runs.length + ' run' + (g.runs.length === 1 ? '' : 's') + ' · ' +
          Object.entries(counts).map(([st, n]) => n + ' ' + st.toLowerCase()).join(', '))));
  }

  function renderRows() {
    const sig = (t) => JSON.stringify(t) + selection.has(t.id) + columns.join(' ') + metricCols.join(' ') +
      [SPARK_METRIC, ...metricCols].map((m) => (curve(m, t.id) || {}).at).join(' ');
    keyed(tbody, entries(), (e) => (e.g ? 'group ' + e.g.key : e.t.id),
      // A header shows its runs' count and statuses: its signature is those.
      (e) => (e.g ? e.g.runs.map((t) => t.status).join(' ') + collapsed.has(e.g.key) : sig(e.t)),
      (e, prev) => (e.g ? groupRow(e.g) : row(e.t, prev && prev.t)));
    loadSparks();
    empty.hidden = items.length > 0 || loading;
    if (!items.length) {
      replace(empty, f.status || f.user || f.project || f.name || moreSet()
        ? [h('strong', null, 'No runs match these filters'), h('span', null, 'Change or clear the filters above.')]
        : [h('strong', null, 'No runs yet'), h('span', null, 'Submit one to see it here. '), h('a', { href: '/submit' }, 'New run')]);
    }
    more.hidden = !cursor;
    footInfo.textContent = items.length ? items.length + ' run' + (items.length === 1 ? '' : 's') + ' shown' : '';
    selAll.checked = items.length > 0 && items.every((t) => selection.has(t.id));
    syncSelBar();
  }

  function syncSelBar() {
    selBar.hidden = selection.size === 0;
    selCount.textContent = selection.size + ' run' + (selection.size === 1 ? '' : 's') + ' selected';
    compareBtn.disabled = selection.size < 1;
  }

  // curves are the series read, by metric then run id: { pts, at }: the
  // reward curve's, and the metric columns' (one request a metric).
  const curves = new Map();
  const curve = (m, id) => (curves.get(m) || new Map()).get(id);
  let sparkBusy = false;
  async function loadSparks() {
    if (sparkBusy) return;
    sparkBusy = true;
    let read = false;
    try {
      for (const m of [SPARK_METRIC, ...metricCols]) {
        if (!curves.has(m)) curves.set(m, new Map());
        const got = curves.get(m);
        const now = Date.now();
        const need = items.slice(0, 100).filter((t) => t.startedAt && (!got.has(t.id) ||
          (!TERMINAL.has(t.status) && now - got.get(t.id).at > SPARK_STALE_MS))).map((t) => t.id);
        if (!need.length) continue;
        read = true;
        try {
          const res = await api.sparklines(need, m, ac.signal);
          const at = Date.now();
          for (const id of need) got.set(id, { pts: (res.items || {})[id] || null, at });
        } catch (e) {
          if (e.name === 'AbortError') return;
          for (const id of need) got.set(id, { pts: null, at: now }); // tried: again when stale
        }
      }
    } finally {
      sparkBusy = false;
    }
    if (read) renderRows();
  }

  function remember(t) {
    if (t.user) users.add(t.user);
    if (t.project) projects.add(t.project);
    for (const k of Object.keys(paramsOf(t))) paramKeys.add(k);
  }

  function syncLists() {
    replace(userDL, [...users].sort().map((u) => h('option', { value: u })));
    replace(projDL, [...projects].sort().map((p) => h('option', { value: p })));
    replace(keysDL, [...paramKeys].sort().map((k) => h('option', { value: k })));
    mine.setAttribute('aria-pressed', String(f.user === ctx.user.username));
  }

  // ---- data ----
  async function load(append = false) {
    const my = append ? gen : ++gen;
    loading = true;
    if (!items.length) { skeleton.hidden = false; empty.hidden = true; }
    try {
      const limit = append ? PAGE : Math.min(500, Math.max(PAGE, items.length));
      const res = await api.tasks({ ...query(), limit, cursor: append ? cursor : '' }, ac.signal);
      if (my !== gen) return;
      if (!append) { items = []; byId.clear(); }
      for (const t of res.items) {
        if (byId.has(t.id)) continue;
        byId.set(t.id, t);
        items.push(t);
        remember(t);
      }
      cursor = res.nextCursor || '';
      loadError = null;
      errBox.hidden = true;
    } catch (e) {
      if (e.name === 'AbortError') return;
      loadError = e;
      errBox.textContent = 'Cannot load runs: ' + e.message;
      errBox.hidden = false;
    } finally {
      loading = false;
      skeleton.hidden = true;
    }
    renderRows();
    syncLists();
  }

  function applyFilters() {
    const u = new URLSearchParams();
    for (const k of ['status', 'user', 'project', 'name', 'tag', 'note', 'sweep', 'rerunOf', 'after', 'before']) if (f[k]) u.set(k, f[k]);
    if (groupBy) u.set('group', groupBy);
    if (f.baseline) u.set('isBaseline', 'true');
    for (const [k, v] of f.params) u.append('param.' + k, v);
    const s = u.toString();
    history.replaceState(null, '', '/runs' + (s ? '?' + s : ''));
    csvLink.href = api.tasksCSV({ ...query(), limit: 500 });
    syncLists();
    load(false);
  }

  // Queue positions are not in WebSocket frames: refresh from REST soon
  // after queue changes while queued runs are shown.
  const refreshQueue = debounce(() => { if (items.some((t) => t.status === 'QUEUED')) load(false); }, 800);

  // Frames are drawn once per animation frame; a burst of new runs (a
  // sweep's members arrive together) reloads the newest page instead.
  let renderPending = 0, burst = 0;
  function renderSoon() {
    if (renderPending) return;
    renderPending = requestAnimationFrame(() => {
      renderPending = 0;
      const reload = burst > PAGE;
      burst = 0;
      if (reload) load(false); else renderRows();
    });
  }

  function onFrame(m) {
    if (m.type === 'subscribed' || m.type === 'lagged') { load(false); return; } // resync after (re)connecting or missed frames
    if (m.type !== 'task' || !m.data || !m.data.id) return;
    const t = m.data;
    remember(t);
    const old = byId.get(t.id);
    if (old && t.status === 'QUEUED' && old.status === 'QUEUED') {
      t.queuePosition ??= old.queuePosition;
      t.pendingReason ??= old.pendingReason;
    }
    if (!matches(t)) {
      if (old) {
        byId.delete(t.id);
        items = items.filter((x) => x.id !== t.id);
      }
    } else {
      byId.set(t.id, t);
      if (old) items = items.map((x) => (x.id === t.id ? t : x));
      else { items.unshift(t); fresh.add(t.id); burst++; }
    }
    renderSoon();
    if (t.status === 'QUEUED' || (old && old.status === 'QUEUED') || TERMINAL.has(t.status)) refreshQueue();
    if (t.kind === 'interactive' && t.userId === ctx.user.id) refreshSessions();
  }

  // Keyboard: j/k move between rows, x selects, Enter opens (the link).
  function onKey(e) {
    const tgt = e.target;
    if (e.metaKey || e.ctrlKey || e.altKey || /^(INPUT|TEXTAREA|SELECT)$/.test(tgt.tagName) && tgt.type !== 'checkbox') return;
    const rows = [...tbody.rows].filter((r) => r.dataset.id);
    if (!rows.length) return;
    const cur = tgt.closest && tgt.closest('tr[data-id]');
    let i = cur ? rows.indexOf(cur) : -1;
    if (e.key === 'j' || e.key === 'k') {
      e.preventDefault();
      i = e.key === 'j' ? Math.min(rows.length - 1, i + 1) : Math.max(0, i - 1);
      rows[i].querySelector('.name a').focus();
    } else if (e.key === 'x' && cur) {
      e.preventDefault();
      cur.querySelector('input[type=checkbox]').click();
    }
  }
  document.addEventListener('keydown', onKey);

  const tick = setInterval(() => {
    const now = Date.now();
    for (const tr of tbody.rows) {
      const t = tr._task;
      if (!t) continue;
      const age = tr.querySelector('[data-age]');
      if (age) age.textContent = fmtAge(parseTime(t.createdAt), now);
      if (!TERMINAL.has(t.status) && t.startedAt) {
        const d = tr.querySelector('[data-dur]');
        if (d) d.textContent = fmtDuration(runDuration(t, now));
      }
    }
    loadSparks(); // running runs' curves, once they are stale
  }, 1000);

  csvLink.href = api.tasksCSV({ ...query(), limit: 500 });
  const unsub = live.subscribe('/topic/tasks', onFrame);
  const stopPoll = poller(() => load(false), 2000, '/topic/tasks');
  load(false);
  renderRows();
  refreshSessions();

  return () => {
    ac.abort();
    cancelAnimationFrame(renderPending);
    unsub();
    stopPoll();
    clearInterval(tick);
    refreshQueue.cancel();
    refreshSessions.cancel();
    onText.cancel();
    document.removeEventListener('keydown', onKey);
  };
}

// paramsFromQuery reads the page's param.<k>=<v> filters: [[k, v], ...].
function paramsFromQuery(q) {
  const out = [];
  for (const [k, v] of q) if (k.startsWith('param.') && k.length > 6) out.push([k.slice(6), v]);
  return out;
}

function paramsText(ps) { return ps.map(([k, v]) => k + '=' + v).join(' '); }

// parseParamFilters reads "lr=0.001 seed=3" into [[k, v], ...].
function parseParamFilters(s) {
  const params = [];
  for (const w of s.trim().split(/\s+/).filter(Boolean)) {
    const i = w.indexOf('=');
    if (i < 1) return { error: 'write each as name=value' };
    params.push([w.slice(0, i), w.slice(i + 1)]);
  }
  return { params };
}

// paramEquals compares a run's param with a filter's value the way the
// server does: as JSON values (numbers as numbers), else as a string.
function paramEquals(have, want) {
  if (have === undefined) return false;
  let w;
  try { w = JSON.parse(want); } catch { w = want; }
  if (w !== null && typeof w === 'object') return false;
  return have === w;
}

// dayRange turns the date inputs (local days, both included) into the
// API's createdAfter and createdBefore.
function dayRange(f) {
  const day = (d, add) => {
    if (!/^\d{4}-\d{2}-\d{2}$/.test(d)) return '';
    const t = new Date(d + 'T00:00');
    t.setDate(t.getDate() + add);
    return Number.isFinite(t.getTime()) ? t.toISOString() : '';
  };
  return { after: day(f.after, 0), before: day(f.before, 1) };
}
