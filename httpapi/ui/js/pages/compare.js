// Compare: the selected runs (ids=, or every member of sweep=) as small
// multiples, one chart per metric that matches a filter (a regex, as
// TensorBoard's), each run a line or, grouped by a param or by seed, each
// group a mean line with a band (± std, a 95% interval of the mean, or
// min–max, clipped to what the runs reached); a table with a row per run
// and the chosen params and metrics as columns; and the server's
// statistics (comparestats.js). Every choice is in the query string, so a
// link shows the same view.

import { api } from '../api.js';
import { LineChart, smoothingControl, BANDS, bandPoint } from '../chart.js';
import { statsPanel, profileTaus } from './comparestats.js';
import { codeCompare } from './comparecode.js';
import { loadSelection, saveSelection } from './runs.js';
import { h, replace, clear, badge, fmtNum, parseTime, paramsOf, paramText, paramShort, varyingKeys, PALETTE, TERMINAL, RESUME_METRIC, debounce } from '../util.js';

const ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_RUNS = 200;
const MAX_CHARTS = 12;

// seedless is a run's argv without its seed ("--seed v" or "--seed=v").
function seedless(argv) {
  const out = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--seed') { i++; continue; }
    if (argv[i].startsWith('--seed=')) continue;
    out.push(argv[i]);
  }
  return out;
}

function seedOf(t) {
  const p = paramsOf(t);
  if ('seed' in p) return paramText(p.seed);
  const a = t.command || [];
  const i = a.indexOf('--seed');
  if (i >= 0 && i + 1 < a.length) return a[i + 1];
  const eq = a.find((x) => x.startsWith('--seed='));
  return eq ? eq.slice(7) : '';
}

// canonical is v as JSON with object keys sorted (the server's group key
// is the canonical JSON of the params without seed).
function canonical(v) {
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  if (v && typeof v === 'object') return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
  return JSON.stringify(v);
}

// seedKey groups runs that differ only in their seed: members of a sweep
// as the server groups them, other runs by their argv without --seed.
function seedKey(t) {
  if (t.sweepId) {
    const { seed, ...rest } = paramsOf(t);
    return 'sweep:' + t.sweepId + ':' + canonical(rest);
  }
  const env = Object.entries(t.env || {}).sort(([a], [b]) => a.localeCompare(b));
  return JSON.stringify([seedless(t.command || []), env, t.gpus]);
}

// groupName names a group of runs by what their names share, without a
// trailing seed marker ("ppo-s1", "ppo-s2" → "ppo").
function groupName(g) {
  const names = g.map((t) => t.name || t.id);
  let p = names[0];
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  p = p.replace(/[-_.\s]*(seed|s)?[-_.\s=]*$/i, '');
  return p.length >= 2 ? p : names[0];
}

// aggregate is the step-aligned mean of a group's series with the band
// chosen, each point [step, lo, hi, n, min, max] for the chart to clip.
function aggregate(seriesList, band) {
  const bySteps = new Map();
  for (const pts of seriesList) for (const [x, y] of pts) {
    if (!bySteps.has(x)) bySteps.set(x, []);
    bySteps.get(x).push(y);
  }
  const steps = [...bySteps.keys()].sort((a, b) => a - b);
  const mean = [], bandPts = [];
  for (const x of steps) {
    const v = bySteps.get(x);
    const m = v.reduce((a, b) => a + b, 0) / v.length;
    const sd = v.length > 1 ? Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / (v.length - 1)) : 0;
    const mn = Math.min(...v), mx = Math.max(...v);
    mean.push([x, m]);
    if (band !== 'none') bandPts.push(bandPoint(band, x, m, sd, v.length, mn, mx));
  }
  return { mean, band: band === 'none' ? null : bandPts };
}

export function mount(root, ctx) {
  const q = ctx.query;
  const sweepId = ID_RE.test(q.get('sweep') || '') ? q.get('sweep') : '';
  let ids = (q.get('ids') || '').split(',').map((s) => s.trim()).filter((s) => ID_RE.test(s));
  if (!ids.length && !sweepId) ids = [...loadSelection()].filter((s) => ID_RE.test(s));
  ids = [...new Set(ids)].slice(0, MAX_RUNS);
  const ac = new AbortController();
  const runs = new Map();     // id -> task
  const metrics = new Map();  // id -> {name: points}
  const colors = new Map();
  const charts = new Map();   // metric -> LineChart
  let filter = q.get('metrics') || '';
  let smooth = Number(q.get('smooth') || 0);
  let by = q.get('by') || (q.get('group') === '1' ? 'seed' : '');   // '', 'seed' or a param name
  let band = BANDS.some(([k]) => k === q.get('band')) ? q.get('band') : 'std';
  let statMetric = q.get('stat') || '';
  let task = q.get('task') || '';
  const logOn = new Set((q.get('log') || '').split(',').filter(Boolean));
  // The metric charts' x (step, relative: since each run's start, wall);
  // the time modes draw the runs' own points, a group's mean is by step.
  let xMode = ['relative', 'wall'].includes(q.get('x')) ? q.get('x') : 'step';
  let showAll = false;
  let onlyDiff = q.get('all') !== '1';

  const filterIn = h('input', { type: 'search', id: 'metric-filter', placeholder: 'e.g. reward|loss', value: filter, 'aria-label': 'Metrics to chart (regex)' });
  const bySel = h('select', { id: 'group-by' });
  const bandSel = h('select', { id: 'band-select' }, BANDS.map(([k, l]) => h('option', { value: k, selected: k === band }, l)));
  const smoothCtl = smoothingControl('compare-smooth', smooth, (a) => { smooth = a; for (const c of charts.values()) c.setSmoothing(a); syncURL(); });
  const chips = h('div', { class: 'chips', id: 'compare-runs' });
  const addSel = h('select', { id: 'add-run', 'aria-label': 'Add a run' }, h('option', { value: '' }, 'Add a run…'));
  addSel.style.width = 'auto';
  addSel.style.maxWidth = '340px';
  const status = h('div', { class: 'notice', hidden: true });
  const grid = h('div', { class: 'charts small-multiples', id: 'compare-charts' });
  const gridNote = h('p', { class: 'muted chart-note', id: 'charts-note' });
  const groupsInfo = h('ul', { class: 'groups', id: 'groups-info' });
  const tableBox = h('div', { class: 'table-wrap runs-compare', id: 'params-diff' });
  const onlyDiffCb = h('input', { type: 'checkbox', id: 'only-diff', checked: onlyDiff });
  const statSel = h('select', { id: 'metric-select' });
  const taskSel = h('select', { id: 'stats-task' });
  const stats = statsPanel();
  const codeBox = h('div', { id: 'code-compare' });
  const code = codeCompare(codeBox, ac.signal);

  filterIn.addEventListener('input', debounce(() => { filter = filterIn.value; syncURL(); drawCharts(); }, 250));
  bySel.addEventListener('change', () => { by = bySel.value; syncURL(); renderChips(); drawCharts(); renderTable(); updateStats(); });
  bandSel.addEventListener('change', () => { band = bandSel.value; syncURL(); drawCharts(); });
  onlyDiffCb.addEventListener('change', () => { onlyDiff = onlyDiffCb.checked; syncURL(); renderTable(); });
  statSel.addEventListener('change', () => { statMetric = statSel.value; syncURL(); updateStats(); });
  taskSel.addEventListener('change', () => { task = taskSel.value; syncURL(); updateStats(); });
  addSel.addEventListener('change', () => {
    const v = addSel.value;
    if (v && !ids.includes(v) && ids.length < MAX_RUNS) { ids.push(v); syncURL(); loadRuns([v]); }
    addSel.value = '';
  });

  replace(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Compare runs'), sweepId ? h('a', { class: 'btn btn-sm', href: '/sweeps/' + sweepId }, 'Sweep ' + sweepId) : null),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Runs'), h('span', { class: 'spacer' }), sweepId ? null : addSel), chips, status),
    h('section', { class: 'card' },
      h('div', { class: 'compare-controls' },
        h('div', { class: 'field' }, h('label', { for: 'metric-filter' }, 'Metrics (regex)'), filterIn),
        h('div', { class: 'field' }, h('label', { for: 'group-by' }, 'Group runs by'), bySel),
        h('div', { class: 'field' }, h('label', { for: 'band-select' }, 'Band'), bandSel),
        smoothCtl),
      grid, gridNote, groupsInfo),
    h('section', { class: 'card', id: 'stats' },
      h('div', { class: 'card-head' }, h('h2', null, 'Statistics'), h('span', { class: 'muted' }, 'across seeds, as an RL paper reports them (IQM, bootstrap intervals)'),
        h('span', { class: 'spacer' }),
        h('div', { class: 'field' }, h('label', { for: 'metric-select' }, 'Metric'), statSel),
        h('div', { class: 'field' }, h('label', { for: 'stats-task' }, 'Task (a param or tag)'), taskSel)),
      stats.el),
    h('section', { class: 'card' },
      h('div', { class: 'card-head' }, h('h2', null, 'Runs, params and metrics'), h('span', { class: 'spacer' }), h('label', { class: 'toggle', for: 'only-diff' }, onlyDiffCb, h('span', null, 'Only params that differ'))),
      tableBox),
    h('section', { class: 'card', id: 'code-compare-card' },
      h('div', { class: 'card-head' }, h('h2', null, 'Code'), h('span', { class: 'muted' }, 'what differs from the first run\'s snapshot')),
      codeBox));

  function syncURL() {
    const u = new URLSearchParams();
    if (sweepId) u.set('sweep', sweepId); else if (ids.length) u.set('ids', ids.join(','));
    if (filter) u.set('metrics', filter);
    if (smooth) u.set('smooth', String(smooth));
    if (by) u.set('by', by);
    if (band !== 'std') u.set('band', band);
    if (statMetric) u.set('stat', statMetric);
    if (task) u.set('task', task);
    if (logOn.size) u.set('log', [...logOn].join(','));
    if (xMode !== 'step') u.set('x', xMode);
    if (!onlyDiff) u.set('all', '1');
    // The URL holds this page's runs; the Runs page's selection is what
    // the reader ticked there, so a shared /compare?ids= link adds nothing
    // to it (a run removed here leaves it, an explicit act).
    history.replaceState(null, '', '/compare' + (u.toString() ? '?' + u : ''));
  }

  function colorOf(key) {
    if (!colors.has(key)) colors.set(key, PALETTE[colors.size % PALETTE.length]);
    return colors.get(key);
  }

  // paint gives each of gs (runs, or groups of them) the palette's colour
  // of its place, and each run its group's: neighbours in the legend, the
  // chips and the table differ, and a run is drawn in one colour
  // everywhere (a colour taken in order of first use gave groups the
  // colours after their runs', two of them alike).
  function paint(gs) {
    colors.clear();
    gs.forEach((g, i) => {
      const c = PALETTE[i % PALETTE.length];
      colors.set(g.key, c);
      for (const t of g.runs) colors.set(t.id, c);
    });
  }

  const loaded = () => ids.map((id) => runs.get(id)).filter(Boolean);

  function renderChips() {
    paint(groups());
    clear(chips);
    if (!ids.length) {
      chips.appendChild(h('p', { class: 'muted' }, sweepId ? 'Loading the sweep…' : ['No runs selected. Tick runs on the ', h('a', { href: '/runs' }, 'Runs'), ' page, or add them here.']));
      return;
    }
    for (const id of ids) {
      const t = runs.get(id);
      const rm = sweepId ? null : h('button', { type: 'button', class: 'btn btn-ghost btn-icon btn-sm', 'aria-label': 'Remove ' + (t ? t.name : id) }, '×');
      if (rm) rm.addEventListener('click', () => {
        ids = ids.filter((x) => x !== id);
        const sel = loadSelection(); sel.delete(id); saveSelection(sel);
        syncURL(); renderAll(); updateStats();
      });
      chips.appendChild(h('span', { class: 'chip', dataset: { id } }, h('span', { class: 'swatch', style: { background: t ? colorOf(id) : 'var(--border-strong)' } }),
        h('a', { class: 'chip-name', href: '/runs/' + id }, t ? t.name || id : id),
        t ? badge(t.status) : h('span', { class: 'faint' }, 'loading'),
        t && t.baseline ? h('span', { class: 'tag baseline' }, 'baseline') : null,
        t && t.finalReward != null ? h('span', { class: 'count' }, fmtNum(t.finalReward)) : null, rm));
    }
  }

  function metricNames() {
    const names = new Set();
    for (const id of ids) for (const n of Object.keys(metrics.get(id) || {})) if (n !== RESUME_METRIC) names.add(n);
    return [...names].sort((a, b) => (a === 'episode_reward' ? -1 : b === 'episode_reward' ? 1 : a.localeCompare(b)));
  }

  // The params runs differ in are the choices of grouping (and of task).
  function renderSelectors() {
    const { varying } = varyingKeys(loaded().map(paramsOf));
    const opts = [['', 'nothing: one line a run'], ['seed', 'everything but the seed'], ...varying.filter((k) => k !== 'seed').map((k) => [k, 'param ' + k])];
    if (by && !opts.some(([k]) => k === by)) opts.push([by, 'param ' + by]);
    replace(bySel, opts.map(([k, l]) => h('option', { value: k, selected: k === by }, l)));
    // A task is a varying param, or a tag NAME:VALUE whose VALUE varies (task=tag.NAME).
    const tagValues = new Map();
    for (const t of loaded()) for (const tag of t.tags || []) {
      const i = tag.indexOf(':');
      if (i < 1 || tag.startsWith('sweep:')) continue;
      const name = tag.slice(0, i);
      if (!tagValues.has(name)) tagValues.set(name, new Set());
      tagValues.get(name).add(tag.slice(i + 1));
    }
    const tagTasks = [...tagValues].filter(([, v]) => v.size > 1).map(([n]) => ['tag.' + n, 'tag ' + n + ':…']);
    replace(taskSel, [['', 'none']].concat(varying.filter((k) => k !== 'seed' && k !== by).map((k) => [k, k]), tagTasks).map(([k, l]) => h('option', { value: k, selected: k === task }, l)));
    const names = metricNames();
    if (!statMetric || !names.includes(statMetric)) statMetric = names.includes('episode_reward') ? 'episode_reward' : names[0] || '';
    replace(statSel, names.length ? names.map((n) => h('option', { value: n, selected: n === statMetric }, n)) : h('option', { value: '' }, 'no metrics yet'));
    statSel.disabled = !names.length;
  }

  // groups are the runs as the chart draws them: [{key, label, runs}].
  function groups() {
    const ts = loaded();
    if (!by) return ts.map((t) => ({ key: t.id, label: (t.name || t.id) + (seedOf(t) !== '' ? ' · seed ' + seedOf(t) : ''), runs: [t] }));
    const g = new Map();
    for (const t of ts) {
      const k = by === 'seed' ? seedKey(t) : by + '=' + canonical(paramsOf(t)[by] ?? null);
      if (!g.has(k)) g.set(k, []);
      g.get(k).push(t);
    }
    return [...g.entries()].map(([k, rs]) => ({
      key: 'group:' + k,
      label: (by === 'seed' ? groupName(rs) : by + '=' + paramShort(paramsOf(rs[0])[by] ?? null)) + (rs.length > 1 ? ' · ' + rs.length + (by === 'seed' ? ' seeds' : ' runs') : ''),
      runs: rs,
    }));
  }

  // pointsOf are a run's [step, value, t] (t the Unix second it was logged).
  function pointsOf(id, metric) {
    const m = metrics.get(id);
    return ((m && m[metric]) || []).filter((p) => p[0] != null && p[1] != null).map((p) => [p[0], p[1], p[2] != null ? p[2] / 1000 : undefined]);
  }

  function startOf(t) {
    return t && t.startedAt ? Math.floor(parseTime(t.startedAt) / 1000) : undefined;
  }

  function seriesOf(metric, gs) {
    return gs.map((g) => {
      const color = colorOf(g.key);
      if (g.runs.length === 1) return { id: g.key, label: g.label, color, points: pointsOf(g.runs[0].id, metric), origin: startOf(g.runs[0]) };
      const a = aggregate(g.runs.map((t) => pointsOf(t.id, metric)), band);
      return { id: g.key, label: g.label, color, points: a.mean, band: a.band };
    });
  }

  function drawCharts() {
    let re = null;
    try { re = filter ? new RegExp(filter, 'i') : null; filterIn.classList.remove('invalid'); } catch { filterIn.classList.add('invalid'); }
    const all = metricNames();
    const matching = all.filter((n) => !re || re.test(n));
    const shown = showAll ? matching : matching.slice(0, MAX_CHARTS);
    for (const [n, c] of charts) if (!shown.includes(n)) { c.destroy(); c.el.remove(); charts.delete(n); }
    const gs = groups();
    paint(gs);
    shown.forEach((n, i) => {
      let c = charts.get(n);
      if (!c) {
        const time = n.startsWith('sys/');
        c = new LineChart({ title: n, name: 'compare:' + n, height: 240, empty: 'No points', xKind: time ? 'time' : 'step',
          onView: (v) => {
            if (v.yLog) logOn.add(n); else logOn.delete(n);
            if (!time && v.xMode !== xMode) { xMode = v.xMode; for (const [m, o] of charts) if (!m.startsWith('sys/')) o.setView({ xMode }); }
            syncURL();
          } });
        c.setSmoothing(smooth);
        if (logOn.has(n)) c.setView({ yLog: true });
        if (!time) c.setView({ xMode });
        charts.set(n, c);
      }
      if (grid.children[i] !== c.el) grid.insertBefore(c.el, grid.children[i] || null); // in the order shown
      c.set(seriesOf(n, gs));
    });
    replace(gridNote, !all.length ? (ids.length ? 'The runs have no metrics yet.' : '') :
      [matching.length + ' of ' + all.length + ' metrics match' + (filter ? ' /' + filter + '/' : ''), shown.length < matching.length ? '; ' : '. ',
        shown.length < matching.length ? h('button', { type: 'button', class: 'btn btn-ghost btn-xs', id: 'show-all-charts', onclick: () => { showAll = true; drawCharts(); } }, 'show all ' + matching.length) : null,
        ' Drag across a chart to zoom, double-click to reset.']);
    clear(groupsInfo);
    if (by) for (const g of gs) if (g.runs.length > 1) {
      const seeds = g.runs.map(seedOf).filter(Boolean);
      groupsInfo.appendChild(h('li', null, h('span', { class: 'swatch', style: { background: colorOf(g.key) } }), ' ', g.label,
        seeds.length ? ' (seeds ' + seeds.join(', ') + ')' : '', ': ', g.runs.map((t) => t.name || t.id).join(', ')));
    }
  }

  // The table: a row per run or, grouped, per group, its first column
  // (the run or group) kept in sight while the rest scrolls sideways;
  // columns the params (those that differ, or all) and the last value of
  // each charted metric, a group's the value its runs share (else their
  // values) and for numbers the mean ± std over its runs. On a narrow
  // screen each row is a card (style.css).
  function renderTable() {
    const ts = loaded();
    if (!ts.length) { replace(tableBox, h('div', { class: 'empty' }, 'No runs to compare.')); return; }
    const { varying, constant } = varyingKeys(ts.map(paramsOf));
    const keys = onlyDiff ? varying : [...varying, ...constant].sort();
    const ms = [...charts.keys()];
    const gs = groups();
    paint(gs);
    const grouped = !!by;
    const lastOf = (t, m) => { const p = pointsOf(t.id, m); return p.length ? p[p.length - 1][1] : null; };
    const meanSd = (vs) => {
      vs = vs.filter((v) => v != null && Number.isFinite(v));
      if (vs.length < 2) return vs.length ? fmtNum(vs[0]) : '';
      const m = vs.reduce((a, b) => a + b, 0) / vs.length;
      const sd = Math.sqrt(vs.reduce((a, b) => a + (b - m) ** 2, 0) / (vs.length - 1));
      return fmtNum(m) + ' ± ' + fmtNum(sd);
    };
    const shared = (vs) => [...new Set(vs)].join(', ');
    const statuses = (rs) => {
      const n = new Map();
      for (const t of rs) n.set(t.status, (n.get(t.status) || 0) + 1);
      return h('span', { class: 'badges' }, [...n].map(([st, k]) => h('span', null, badge(st), k > 1 ? ' ×' + k : '')));
    };
    const cols = [
      ['status', 'Status', (rs) => (rs.length === 1 ? badge(rs[0].status) : statuses(rs))],
      ['final reward', 'Final reward', (rs) => meanSd(rs.map((t) => t.finalReward))],
      ...keys.map((k) => ['param ' + k, k, (rs) => shared(rs.map((t) => paramShort(paramsOf(t)[k]))), (rs) => shared(rs.map((t) => paramText(paramsOf(t)[k])))]),
      ...ms.map((m) => ['metric ' + m, m + ' (last)', (rs) => meanSd(rs.map((t) => lastOf(t, m)))]),
    ];
    const first = grouped ? 'Group' : 'Run';
    const head = h('tr', null, h('th', { class: 'run-cell' }, first), cols.map(([key, label]) => h('th', { dataset: { key }, class: varying.includes(key.slice(6)) && key.startsWith('param ') ? 'differs' : null }, label)));
    const link = (t) => h('a', { href: '/runs/' + t.id }, t.name || t.id);
    const swatch = (key) => h('span', { class: 'swatch', style: { background: colorOf(key) } });
    const body = gs.map((g) => h('tr', { dataset: grouped ? { group: g.key, runs: String(g.runs.length) } : { id: g.runs[0].id } },
      h('td', { class: 'run-cell', 'data-label': first }, grouped
        ? [h('strong', null, swatch(g.key), ' ', g.label), h('div', { class: 'sub' }, g.runs.map((t, i) => [i ? ', ' : '', link(t)]))]
        : h('span', null, swatch(g.key), ' ', link(g.runs[0]))),
      cols.map(([key, label, get, whole]) => {
        const v = get(g.runs);
        return h('td', { 'data-label': label, dataset: { key }, title: whole ? whole(g.runs) : null, class: key.startsWith('param ') || key.startsWith('metric ') ? 'mono' : null }, v === '' ? '—' : v);
      })));
    replace(tableBox, h('table', { class: 'data compare-table' }, h('thead', null, head), h('tbody', null, body)),
      grouped ? h('p', { class: 'muted', id: 'group-numbers' }, 'A group\'s numbers are the mean ± std over its runs; a param its runs do not share lists their values.') : null,
      !onlyDiff || !constant.length ? null : h('p', { class: 'muted', id: 'constant-params' }, 'Every run: ', constant.map((k) => k + '=' + paramShort(paramsOf(ts[0])[k])).join(' ')));
  }

  function updateStats() {
    const ts = loaded();
    const scores = ts.map((t) => { const p = pointsOf(t.id, statMetric); return p.length ? p[p.length - 1][1] : NaN; });
    const sel = sweepId ? { sweep: sweepId } : { ids: ts.map((t) => t.id) };
    stats.update({
      ...sel, metric: statMetric,
      by: by && by !== 'seed' ? 'param.' + by : '',
      task: !task ? '' : task.startsWith('tag.') ? task : 'param.' + task,
      taus: profileTaus(scores),
      colorOf: (name) => {
        const g = groups().find((x) => x.key === 'group:' + by + '=' + name || x.label.startsWith(by + '=' + name));
        return g ? colorOf(g.key) : colorOf('stats:' + name);
      },
    });
  }
  const statsSoon = debounce(updateStats, 300);

  function renderAll() {
    renderChips();
    renderSelectors();
    drawCharts();
    renderTable();
    code.update(loaded());
  }

  async function loadRuns(list) {
    renderChips();
    const t0 = performance.now();
    // At most 8 requests at a time: a sweep's hundred members do not
    // queue a hundred fetches at once.
    const queue = [...list];
    await Promise.all(Array.from({ length: Math.min(8, queue.length) }, async () => {
      for (let id = queue.shift(); id; id = queue.shift()) {
        try {
          const [t, m] = await Promise.all([runs.get(id) && TERMINAL.has(runs.get(id).status) ? runs.get(id) : api.task(id, ac.signal), api.metrics(id, null, ac.signal, true)]);
          runs.set(id, t);
          metrics.set(id, m.series || {});
        } catch (e) {
          if (e.name === 'AbortError') return;
          ids = ids.filter((x) => x !== id);
          status.hidden = false;
          status.textContent = 'Run ' + id + ': ' + e.message;
        }
      }
    }));
    const t1 = performance.now();
    renderAll();
    grid.dataset.drawMs = String(Math.round(performance.now() - t1));
    grid.dataset.loadMs = String(Math.round(t1 - t0));
    statsSoon();
  }

  async function loadSweep() {
    try {
      const sw = await api.sweep(sweepId, ac.signal);
      ids = (sw.runs || []).map((t) => t.id).slice(0, MAX_RUNS);
      for (const t of sw.runs || []) runs.set(t.id, t);
      if ((sw.runs || []).length > MAX_RUNS) { status.hidden = false; status.textContent = 'The first ' + MAX_RUNS + ' of ' + sw.runs.length + ' members are charted; the statistics use all.'; }
      await loadRuns(ids);
    } catch (e) {
      if (e.name !== 'AbortError') { status.hidden = false; status.textContent = 'Sweep ' + sweepId + ': ' + e.message; }
    }
  }

  async function loadPicker() {
    try {
      const r = await api.tasks({ limit: 100 }, ac.signal);
      replace(addSel, h('option', { value: '' }, 'Add a run…'),
        r.items.filter((t) => !ids.includes(t.id)).map((t) => h('option', { value: t.id }, (t.name || t.id) + ' · ' + t.status + ' · ' + t.user)));
    } catch { /* the picker is optional */ }
  }

  // Runs still going: refresh their status and metrics every 3 s.
  const timer = setInterval(async () => {
    if (document.visibilityState === 'hidden') return;
    const activeIds = ids.filter((id) => runs.get(id) && !TERMINAL.has(runs.get(id).status));
    if (!activeIds.length) return;
    await loadRuns(activeIds);
  }, 3000);

  syncURL();
  if (sweepId) loadSweep(); else { loadRuns(ids); loadPicker(); }
  return () => { ac.abort(); clearInterval(timer); statsSoon.cancel(); stats.destroy(); for (const c of charts.values()) c.destroy(); };
}
