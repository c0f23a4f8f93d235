// The compare page's statistics, as the server estimates them (GET
// /api/compare: package stats, rliable's estimators): the aggregate table
// (IQM, mean, median, optimality gap, each with its stratified bootstrap
// interval), the performance profiles, the probability-of-improvement
// matrix and the IQM curves over steps, each exportable as SVG, PNG or CSV
// (the tables drawn as a grid of cells; the charts from their menus).

import { api } from '../api.js';
import { LineChart } from '../chart.js';
import { downloadCSV, downloadSVG, downloadPNG, tableSvg } from '../chartexport.js';
import { h, replace, clear, fmtNum } from '../util.js';

const STATS = [['iqm', 'IQM'], ['mean', 'Mean'], ['median', 'Median'], ['gap', 'Optimality gap']];
const PROFILE_POINTS = 15;
const CURVE_POINTS = 60;

function interval(s) {
  if (!s || s.value == null) return '—';
  const ci = s.ci || [];
  return fmtNum(s.value) + (ci[0] != null ? ' [' + fmtNum(ci[0]) + ', ' + fmtNum(ci[1]) + ']' : '');
}

// statsPanel is the card; update(q) asks the server for selection q
// ({ids} or {sweep}, metric, by, task, taus, colorOf(name)).
export function statsPanel() {
  const note = h('p', { class: 'muted', id: 'stats-note' }, 'Computing…'); // until the first update says more
  const tableBox = h('div', { class: 'table-wrap', id: 'stats-table' });
  const matrixBox = h('div', { class: 'table-wrap', id: 'improve-matrix' });
  const profile = new LineChart({ name: 'profile', title: 'Performance profile: fraction of runs scoring above τ', height: 240, xLabel: 'τ (score)', empty: 'No profile' });
  const curve = new LineChart({ name: 'iqm-curve', title: 'IQM over steps', height: 240, empty: 'No curve' });
  const el = h('div', { class: 'stats-body' }, note, tableBox,
    h('div', { class: 'charts stats-charts' }, profile.el, curve.el),
    h('h3', { class: 'stats-h' }, 'Probability of improvement, P(row > column)'), matrixBox);
  let seq = 0;
  let ac = null;

  // exportButtons: the table as CSV (rows(), the numbers in full) and as
  // SVG or PNG (shown(), the cells as the page shows them; fill tints them).
  function exportButtons(id, rows, shown, name, fill) {
    const b = (kind, f) => {
      const e = h('button', { type: 'button', class: 'btn btn-ghost btn-xs', id: id + '-' + kind.toLowerCase() }, kind);
      e.addEventListener('click', f);
      return e;
    };
    return h('span', { class: 'stats-export' }, b('CSV', () => downloadCSV(rows(), name)),
      b('SVG', () => downloadSVG(tableSvg(shown(), fill), name)), b('PNG', () => downloadPNG(tableSvg(shown(), fill), name)));
  }

  function renderTable(ans) {
    const head = h('tr', null, h('th', null, 'Group'), h('th', { class: 'num' }, 'Runs'), STATS.map(([, l]) => h('th', { class: 'num' }, l)));
    // data-label names a cell where a phone shows the table as a card a group.
    const rows = ans.groups.map((g) => h('tr', { dataset: { group: g.name } },
      h('td', { 'data-label': 'Group' }, h('span', { class: 'swatch', style: { background: g.color } }), ' ', g.name || 'all'),
      h('td', { class: 'num', 'data-label': 'Runs' }, String(g.n) + (g.skipped ? ' (' + g.skipped + ' skipped)' : '')),
      STATS.map(([k, l]) => h('td', { class: 'num', dataset: { stat: k }, 'data-label': l }, interval((g.stats || {})[k])))));
    const csv = () => [['group', 'runs', ...STATS.flatMap(([k]) => [k, k + '_lo', k + '_hi'])],
      ...ans.groups.map((g) => [g.name, g.n, ...STATS.flatMap(([k]) => { const s = (g.stats || {})[k] || {}; return [s.value, (s.ci || [])[0], (s.ci || [])[1]]; })])];
    replace(tableBox, h('div', { class: 'stats-head' },
      h('span', { class: 'muted' }, ans.metric + ': ' + ans.runs + ' runs' + (ans.tasks && ans.tasks.length ? ' over ' + ans.tasks.length + ' tasks' : '') +
        ', ' + (ans.missing || 0) + ' without the metric · ' + Math.round(ans.ci * 100) + '% stratified bootstrap intervals, ' + ans.reps + ' reps, seed ' + ans.seed),
      h('span', { class: 'spacer' }), exportButtons('stats', csv, () => [['Group', 'Runs', ...STATS.map(([, l]) => l)],
        ...ans.groups.map((g) => [g.name || 'all', g.n, ...STATS.map(([k]) => interval((g.stats || {})[k]))])], 'compare-' + ans.metric)),
    h('table', { class: 'data stats' }, h('thead', null, head), h('tbody', null, rows)));
  }

  function renderMatrix(ans) {
    const imp = ans.improvements || [];
    if (!imp.length) { replace(matrixBox, h('p', { class: 'muted' }, ans.groups.length < 2 ? 'Needs two groups.' : 'Not computed (at most 20 groups).')); return; }
    const names = ans.groups.map((g) => g.name);
    const at = new Map(imp.map((p) => [p.a + '\u0000' + p.b, p]));
    const pair = (a, b) => { const p = a === b ? null : at.get(a + '\u0000' + b); return p && p.value != null ? p : null; };
    // Blue above one half, orange below, stronger the farther.
    const tint = (v) => v >= 0.5 ? 'rgba(79,124,255,' + ((v - 0.5) * 1.2).toFixed(2) + ')' : 'rgba(240,100,46,' + ((0.5 - v) * 1.2).toFixed(2) + ')';
    const ci = (p) => '[' + fmtNum(p.ci[0], 3) + ', ' + fmtNum(p.ci[1], 3) + ']';
    const cell = (a, b) => {
      if (a === b) return h('td', { class: 'num faint' }, '—');
      const p = pair(a, b);
      if (!p) return h('td', { class: 'num' }, '');
      return h('td', { class: 'num pi', style: { background: tint(p.value) }, dataset: { a, b }, title: 'P(' + a + ' > ' + b + ')' },
        fmtNum(p.value, 3), h('span', { class: 'ci' }, ' ' + ci(p)));
    };
    const csv = () => [['P(row > column)', ...names], ...names.map((a) => [a, ...names.map((b) => { const p = pair(a, b); return p ? p.value : ''; })])];
    const shown = () => [['P(row > column)', ...names], ...names.map((a) => [a, ...names.map((b) => { const p = pair(a, b); return a === b ? '—' : p ? fmtNum(p.value, 3) + ' ' + ci(p) : ''; })])];
    const fill = (r, c) => { const p = c ? pair(names[r], names[c - 1]) : null; return p ? tint(p.value) : null; };
    replace(matrixBox, h('div', { class: 'stats-head' }, h('span', { class: 'spacer' }), exportButtons('improve', csv, shown, 'improvement-' + ans.metric, fill)),
      h('table', { class: 'data matrix' },
        h('thead', null, h('tr', null, h('th', null, 'row \\ column'), names.map((n) => h('th', { class: 'num' }, n)))),
        h('tbody', null, names.map((a) => h('tr', null, h('th', null, a), names.map((b) => cell(a, b)))))));
  }

  function renderCharts(ans) {
    profile.set(ans.groups.filter((g) => (g.profile || []).length).map((g) => ({
      id: g.name, label: g.name || 'all', color: g.color,
      points: g.profile.map((p) => [p[0], p[1]]), band: g.profile.map((p) => [p[0], p[2], p[3], null, 0, 1]),
    })));
    curve.set(ans.groups.filter((g) => (g.curve || []).length).map((g) => ({
      id: g.name, label: g.name || 'all', color: g.color,
      points: g.curve.map((p) => [p[0], p[1]]), band: g.curve.map((p) => [p[0], p[2], p[3]]),
    })));
  }

  async function update(q) {
    const my = ++seq;
    if (ac) ac.abort();
    ac = new AbortController();
    if (!q.metric || !(q.ids && q.ids.length) && !q.sweep) {
      note.textContent = 'Pick runs with a metric to see the statistics.';
      clear(tableBox); clear(matrixBox); profile.set([]); curve.set([]);
      return;
    }
    note.textContent = 'Computing…';
    const query = { metric: q.metric, stat: 'iqm,mean,median,gap', reps: 2000, seed: 1, curve: CURVE_POINTS, improve: 'all' };
    if (q.sweep) query.sweep = q.sweep; else query.ids = q.ids.join(',');
    if (q.by) query.by = q.by;
    if (q.task) query.task = q.task;
    // Written in full (a number's shortest exact text), so the ends are
    // the scores' own min and max, which the server holds τ to.
    if (q.taus && q.taus.length) query.profile = q.taus.map(String).join(',');
    const t0 = performance.now();
    let ans, dropped = '';
    try {
      ans = await api.compare(query, ac.signal);
    } catch (e) {
      if (e.name === 'AbortError' || my !== seq) return;
      // improve=all refuses more than 20 groups, and a τ outside the
      // scores (a run still going moved them): ask again without them.
      if (e.status === 400 && /improve|profile|τ|tau/.test(e.message)) {
        if (/improve/.test(e.message)) delete query.improve; else { delete query.profile; dropped = 'the profile (' + e.message + ')'; }
        try { ans = await api.compare(query, ac.signal); } catch (e2) { if (my === seq) note.textContent = 'Cannot compute: ' + e2.message; return; }
      } else {
        note.textContent = 'Cannot compute: ' + e.message;
        return;
      }
    }
    if (my !== seq) return;
    for (const g of ans.groups) g.color = q.colorOf(g.name);
    note.textContent = 'Computed by the server in ' + Math.round(performance.now() - t0) + ' ms.' +
      (ans.groups.length ? '' : ' No group has the metric.') + (dropped ? ' Left out: ' + dropped + '.' : '');
    note.dataset.state = 'done';
    renderTable(ans);
    renderCharts(ans);
    renderMatrix(ans);
  }

  return { el, update, destroy: () => { if (ac) ac.abort(); profile.destroy(); curve.destroy(); } };
}

// profileTaus is a grid of PROFILE_POINTS thresholds over the scores' range.
export function profileTaus(scores) {
  const fin = scores.filter(Number.isFinite);
  if (!fin.length) return [];
  const lo = Math.min(...fin), hi = Math.max(...fin);
  if (hi === lo) return [lo];
  return Array.from({ length: PROFILE_POINTS }, (_, i) => (i === PROFILE_POINTS - 1 ? hi : lo + ((hi - lo) * i) / (PROFILE_POINTS - 1)));
}
