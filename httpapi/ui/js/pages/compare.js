// Compare: the selected runs' curves of one metric overlaid; runs that
// differ only in their seed can be folded into mean ± std; a params table
// that highlights what differs. Members of a sweep group as the server
// groups them (their params without seed, see the sweep page); other runs,
// compared ad hoc, by their argv without --seed.

import { api } from '../api.js';
import { LineChart, ema } from '../chart.js';
import { loadSelection, saveSelection } from './runs.js';
import { h, replace, clear, badge, fmtNum, shellQuote, paramsOf, paramText, PALETTE, TERMINAL } from '../util.js';

const ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_RUNS = 20;

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

// groupName names a group of runs by what their names share, without a
// trailing seed marker ("ppo-s1", "ppo-s2" → "ppo").
function groupName(g) {
  const names = g.map((t) => t.name || t.id);
  let p = names[0];
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  p = p.replace(/[-_.\s]*(seed|s)?[-_.\s=]*$/i, '');
  return p.length >= 2 ? p : names[0];
}

// canonical is v as JSON with object keys sorted (the server's group key
// is the canonical JSON of the params without seed).
function canonical(v) {
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  if (v && typeof v === 'object') return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
  return JSON.stringify(v);
}

function groupKey(t) {
  if (t.sweepId) {
    const { seed, ...rest } = paramsOf(t);
    return 'sweep:' + t.sweepId + ':' + canonical(rest);
  }
  const env = Object.entries(t.env || {}).sort(([a], [b]) => a.localeCompare(b));
  return JSON.stringify([seedless(t.command || []), env, t.gpus]);
}

export function mount(root, ctx) {
  let ids = (ctx.query.get('ids') || '').split(',').map((s) => s.trim()).filter((s) => ID_RE.test(s));
  if (!ids.length) ids = [...loadSelection()].filter((s) => ID_RE.test(s));
  ids = [...new Set(ids)].slice(0, MAX_RUNS);
  const ac = new AbortController();
  const runs = new Map();     // id -> task
  const metrics = new Map();  // id -> {name: points}
  const colors = new Map();
  let metric = ctx.query.get('metric') || '';
  let smooth = Number(ctx.query.get('smooth') || 0);
  let grouped = ctx.query.get('group') === '1';
  let onlyDiff = false;

  const chart = new LineChart({ title: '', height: 340, empty: 'Pick runs with metrics to compare', name: 'compare' });
  const metricSel = h('select', { id: 'metric-select' });
  const smoothSel = h('select', { id: 'smooth-select' }, [['0', 'None'], ['0.6', '0.6'], ['0.8', '0.8'], ['0.9', '0.9'], ['0.97', '0.97']].map(([v, l]) => h('option', { value: v, selected: Number(v) === smooth }, l)));
  const groupCb = h('input', { type: 'checkbox', id: 'group-seeds', checked: grouped });
  const groupLbl = h('label', { class: 'toggle', for: 'group-seeds' }, groupCb, h('span', null, 'Group runs that differ only in seed (mean ± std)'));
  const groupsInfo = h('ul', { class: 'groups', id: 'groups-info' });
  const chips = h('div', { class: 'chips', id: 'compare-runs' });
  const addSel = h('select', { id: 'add-run', 'aria-label': 'Add a run' }, h('option', { value: '' }, 'Add a run…'));
  addSel.style.width = 'auto';
  addSel.style.maxWidth = '340px';
  const diffBox = h('div', { class: 'table-wrap', id: 'params-diff' });
  const onlyDiffCb = h('input', { type: 'checkbox', id: 'only-diff' });
  const status = h('div', { class: 'notice', hidden: true });

  metricSel.addEventListener('change', () => { metric = metricSel.value; syncURL(); draw(); });
  smoothSel.addEventListener('change', () => { smooth = Number(smoothSel.value); syncURL(); draw(); });
  groupCb.addEventListener('change', () => { grouped = groupCb.checked; syncURL(); draw(); });
  onlyDiffCb.addEventListener('change', () => { onlyDiff = onlyDiffCb.checked; renderDiff(); });
  addSel.addEventListener('change', () => {
    const v = addSel.value;
    if (v && !ids.includes(v) && ids.length < MAX_RUNS) { ids.push(v); syncURL(); loadRuns([v]); }
    addSel.value = '';
  });

  replace(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Compare runs')),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Runs'), h('span', { class: 'spacer' }), addSel), chips, status),
    h('section', { class: 'card' },
      h('div', { class: 'compare-controls' },
        h('div', { class: 'field' }, h('label', { for: 'metric-select' }, 'Metric'), metricSel),
        h('div', { class: 'field' }, h('label', { for: 'smooth-select' }, 'Smoothing'), smoothSel),
        groupLbl),
      chart.el, groupsInfo),
    h('section', { class: 'card' },
      h('div', { class: 'card-head' }, h('h2', null, 'Params'), h('span', { class: 'spacer' }), h('label', { class: 'toggle', for: 'only-diff' }, onlyDiffCb, h('span', null, 'Only differences'))),
      diffBox));

  function syncURL() {
    const u = new URLSearchParams();
    if (ids.length) u.set('ids', ids.join(','));
    if (metric) u.set('metric', metric);
    if (smooth) u.set('smooth', String(smooth));
    if (grouped) u.set('group', '1');
    history.replaceState(null, '', '/compare' + (u.toString() ? '?' + u : ''));
    const sel = loadSelection();
    let changed = false;
    for (const id of ids) if (!sel.has(id)) { sel.add(id); changed = true; }
    if (changed) saveSelection(sel);
  }

  function colorOf(id) {
    if (!colors.has(id)) colors.set(id, PALETTE[colors.size % PALETTE.length]);
    return colors.get(id);
  }

  function renderChips() {
    clear(chips);
    if (!ids.length) {
      chips.appendChild(h('p', { class: 'muted' }, 'No runs selected. Tick runs on the ', h('a', { href: '/runs' }, 'Runs'), ' page, or add them here.'));
      return;
    }
    for (const id of ids) {
      const t = runs.get(id);
      const rm = h('button', { type: 'button', class: 'btn btn-ghost btn-icon btn-sm', 'aria-label': 'Remove ' + (t ? t.name : id) }, '×');
      rm.addEventListener('click', () => {
        ids = ids.filter((x) => x !== id);
        const sel = loadSelection(); sel.delete(id); saveSelection(sel);
        syncURL(); renderAll();
      });
      const sw = h('span', { class: 'swatch' });
      sw.style.background = colorOf(id);
      chips.appendChild(h('span', { class: 'chip', dataset: { id } }, sw,
        h('a', { href: '/runs/' + id }, t ? t.name || id : id),
        t ? badge(t.status) : h('span', { class: 'faint' }, 'loading'),
        t && t.finalReward != null ? h('span', { class: 'count' }, fmtNum(t.finalReward)) : null, rm));
    }
  }

  function metricNames() {
    const names = new Set();
    for (const id of ids) for (const n of Object.keys(metrics.get(id) || {})) names.add(n);
    return [...names].sort((a, b) => (a === 'episode_reward' ? -1 : b === 'episode_reward' ? 1 : a.localeCompare(b)));
  }

  function renderMetricSel() {
    const names = metricNames();
    if (!metric || !names.includes(metric)) metric = names.includes('episode_reward') ? 'episode_reward' : names[0] || '';
    replace(metricSel, names.length ? names.map((n) => h('option', { value: n, selected: n === metric }, n)) : h('option', { value: '' }, 'no metrics yet'));
    metricSel.disabled = !names.length;
  }

  function groups() {
    const g = new Map();
    for (const id of ids) {
      const t = runs.get(id);
      if (!t) continue;
      const k = groupKey(t);
      if (!g.has(k)) g.set(k, []);
      g.get(k).push(t);
    }
    return [...g.values()];
  }

  function pointsOf(id) {
    const m = metrics.get(id);
    const pts = (m && m[metric]) || [];
    return ema(pts.filter((p) => p[0] != null && p[1] != null), smooth);
  }

  function draw() {
    const gs = groups();
    const canGroup = gs.some((g) => g.length > 1);
    groupCb.disabled = !canGroup;
    groupLbl.title = canGroup ? '' : 'No two selected runs differ only in seed';
    clear(groupsInfo);
    const out = [];
    if (grouped && canGroup) {
      gs.forEach((g) => {
        const color = colorOf(g[0].id);
        if (g.length === 1) {
          out.push({ id: g[0].id, label: g[0].name || g[0].id, color, points: pointsOf(g[0].id) });
          return;
        }
        const bySteps = new Map();
        for (const t of g) for (const [x, y] of pointsOf(t.id)) {
          if (!bySteps.has(x)) bySteps.set(x, []);
          bySteps.get(x).push(y);
        }
        const steps = [...bySteps.keys()].sort((a, b) => a - b);
        const mean = [], band = [];
        for (const x of steps) {
          const v = bySteps.get(x);
          const m = v.reduce((a, b) => a + b, 0) / v.length;
          const sd = v.length > 1 ? Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / (v.length - 1)) : 0;
          mean.push([x, m]);
          band.push([x, m - sd, m + sd]);
        }
        const seeds = g.map(seedOf).filter(Boolean);
        const label = groupName(g) + ' · ' + g.length + ' seeds';
        out.push({ id: 'group:' + g[0].id, label, color, points: mean, band });
        groupsInfo.appendChild(h('li', null, h('span', { class: 'swatch', style: { background: color } }), ' ', label, seeds.length ? ' (seeds ' + seeds.join(', ') + ')' : '', ': ', g.map((t) => t.name || t.id).join(', '),
          g[0].sweepId ? [' · ', h('a', { href: '/sweeps/' + g[0].sweepId }, 'its sweep')] : null));
      });
    } else {
      for (const id of ids) {
        const t = runs.get(id);
        if (!t) continue;
        out.push({ id, label: (t.name || id) + (seedOf(t) !== '' ? ' · seed ' + seedOf(t) : ''), color: colorOf(id), points: pointsOf(id) });
      }
    }
    chart.opts.xLabel = 'step';
    chart.set(out);
  }

  function renderDiff() {
    const ts = ids.map((id) => runs.get(id)).filter(Boolean);
    if (!ts.length) { replace(diffBox, h('div', { class: 'empty' }, 'No runs to compare.')); return; }
    const keys = new Set();
    for (const t of ts) for (const k of Object.keys(paramsOf(t))) keys.add(k);
    const rows = [
      ['status', (t) => t.status],
      ['final reward', (t) => (t.finalReward != null ? fmtNum(t.finalReward) : '')],
      ['user', (t) => t.user],
      ['project', (t) => t.project || ''],
      ['command', (t) => shellQuote(t.command)],
      ['gpus', (t) => String(t.gpus)],
      ['code', (t) => (t.code && t.code.gitCommit ? t.code.gitCommit.slice(0, 12) + (t.code.gitDirty ? ' (dirty)' : '') : '')],
      ...[...keys].sort().map((k) => ['param ' + k, (t) => paramText(paramsOf(t)[k])]),
    ];
    const body = h('tbody');
    let shown = 0;
    for (const [label, get] of rows) {
      const vals = ts.map(get);
      const differs = new Set(vals).size > 1;
      if (onlyDiff && !differs) continue;
      shown++;
      body.appendChild(h('tr', { class: differs ? 'differs' : null, dataset: { key: label } },
        h('th', null, label),
        vals.map((v, i) => (label === 'status' ? h('td', null, badge(ts[i].status)) : h('td', { class: differs ? '' : 'same' }, v === '' ? '—' : v)))));
    }
    if (!shown) body.appendChild(h('tr', null, h('td', { colspan: ts.length + 1, class: 'muted' }, 'The runs agree on every field.')));
    replace(diffBox, h('table', { class: 'data diff' },
      h('thead', null, h('tr', null, h('th', null, 'Field'), ts.map((t) => {
        const sw = h('span', { class: 'swatch' });
        sw.style.background = colorOf(t.id);
        return h('th', { class: 'run-h' }, sw, ' ', h('a', { href: '/runs/' + t.id }, t.name || t.id));
      }))),
      body));
  }

  function renderAll() {
    renderChips();
    renderMetricSel();
    draw();
    renderDiff();
  }

  async function loadRuns(list) {
    renderChips();
    await Promise.all(list.map(async (id) => {
      try {
        const [t, m] = await Promise.all([api.task(id, ac.signal), api.metrics(id, null, ac.signal)]);
        runs.set(id, t);
        metrics.set(id, m.series || {});
      } catch (e) {
        if (e.name === 'AbortError') return;
        ids = ids.filter((x) => x !== id);
        status.hidden = false;
        status.textContent = 'Run ' + id + ': ' + e.message;
      }
    }));
    renderAll();
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
  loadRuns(ids);
  loadPicker();
  return () => { ac.abort(); clearInterval(timer); chart.destroy(); };
}
