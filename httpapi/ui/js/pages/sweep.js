// Sweep page: the seed groups of one sweep (its members' params without the
// seed, from the server) as a table sorted by mean final reward, each
// group's curve as a mean line with a band (± std, the 95% interval of the
// mean or min–max), a click through to a group's member runs, and retry /
// cancel; for a search (tpe, earlyStop) the best params with their
// interval, the params' importances and why members stopped early; the
// groups across their params as parallel coordinates and, with two params
// or more, a heatmap (parcoords.js).

import { api } from '../api.js';
import { live, poller } from '../live.js';
import { LineChart, smoothingControl, BANDS, bandPoint } from '../chart.js';
import { progressBar, progressOf } from './sweeps.js';
import { parallelCoords, heatmap } from '../parcoords.js';
import {
  h, replace, badge, fmtNum, fmtTime, parseTime, paramsOf, paramText, paramShort, varyingKeys, paramsLabel, statusCounts,
  toast, debounce, PALETTE,
} from '../util.js';

export function mount(root, ctx) {
  const id = ctx.params.id;
  const ac = new AbortController();
  let sw = null;               // GET /api/sweeps/{id}
  let curves = [];             // its groups' curves of metric
  let metric = ctx.query.get('metric') || '';
  let metricNames = [];
  const colors = new Map();    // group key → colour, kept across reloads
  const open = new Set();      // group keys shown with their runs
  let confirming = false;
  let destroyed = false;

  const head = h('div');
  const progress = h('div', { class: 'card', id: 'sweep-progress' });
  const search = h('section', { class: 'card', id: 'sweep-search', hidden: true });
  let smooth = Number(ctx.query.get('smooth') || 0);
  const view = { yLog: ctx.query.get('log') === '1' };
  const chart = new LineChart({ height: 320, empty: 'No points yet: the members report them with RLSCHED_METRIC lines', name: 'sweep',
    onView: (v) => { view.yLog = v.yLog; syncURL(); } });
  chart.setSmoothing(smooth);
  chart.setView(view);
  const metricSel = h('select', { id: 'sweep-metric' });
  metricSel.addEventListener('change', () => {
    metric = metricSel.value;
    syncURL();
    loadCurves();
  });
  const smoothCtl = smoothingControl('sweep-smooth', smooth, (a) => { smooth = a; chart.setSmoothing(a); syncURL(); });
  let band = BANDS.some(([k]) => k === ctx.query.get('band')) ? ctx.query.get('band') : 'std';
  const bandSel = h('select', { id: 'sweep-band', 'aria-label': 'Band' }, BANDS.map(([k, l]) => h('option', { value: k, selected: k === band }, l)));
  bandSel.addEventListener('change', () => { band = bandSel.value; syncURL(); drawCurves(); });
  // syncURL keeps the view in the address, so a link shows what this page shows.
  function syncURL() {
    const u = new URLSearchParams();
    if (metric) u.set('metric', metric);
    if (smooth) u.set('smooth', String(smooth));
    if (band !== 'std') u.set('band', band);
    if (view.yLog) u.set('log', '1');
    if (heatX) u.set('hx', heatX);
    if (heatY) u.set('hy', heatY);
    history.replaceState(null, '', '/sweeps/' + id + (u.toString() ? '?' + u : ''));
  }
  const curveNote = h('p', { class: 'muted chart-note' });
  const groupsBox = h('div', { class: 'table-wrap', id: 'groups' });
  const constants = h('p', { class: 'muted', id: 'constant-params' });
  const paramsCard = h('section', { class: 'card', id: 'sweep-params', hidden: true });
  let heatX = ctx.query.get('hx') || '', heatY = ctx.query.get('hy') || '';

  replace(root, head, progress, search,
    h('section', { class: 'card', id: 'curves' },
      h('div', { class: 'card-head' }, h('h2', null, 'Curves'), h('span', { class: 'muted' }, 'the mean across the seeds of each group, its band within the runs\' min and max'),
        h('span', { class: 'spacer' }), smoothCtl, h('div', { class: 'field' }, bandSel), h('div', { class: 'field' }, h('label', { for: 'sweep-metric', class: 'sr-only' }, 'Metric'), metricSel),
        h('a', { class: 'btn btn-sm', href: '/compare?sweep=' + encodeURIComponent(id), id: 'sweep-stats' }, 'Statistics')),
      chart.el, curveNote),
    paramsCard,
    h('section', { class: 'card' },
      h('div', { class: 'card-head' }, h('h2', null, 'Groups'), h('span', { class: 'muted' }, 'runs with equal params but for the seed; best mean final reward first'),
        h('span', { class: 'spacer' }), h('a', { class: 'btn btn-sm', href: api.sweepCSV(id), download: 'sweep-' + id + '.csv', id: 'sweep-csv' }, 'Export CSV')),
      constants, groupsBox));

  const keyOf = (params) => JSON.stringify(params);
  function colorOf(key) {
    if (!colors.has(key)) colors.set(key, PALETTE[colors.size % PALETTE.length]);
    return colors.get(key);
  }
  const mayChange = () => sw && (ctx.user.role === 'ADMIN' || ctx.user.id === sw.userId);

  function renderHead() {
    const p = progressOf(sw.counts, (sw.stops || []).length);
    const actions = h('div', { class: 'btn-row' });
    // A retry reruns the members stopped early too (they are CANCELLED).
    const retried = p.failed + p.stopped;
    if (mayChange() && retried > 0) {
      const b = h('button', { type: 'button', class: 'btn btn-sm', id: 'retry-sweep' },
        'Retry ' + retried + (p.stopped ? ' not succeeded' : ' failed'));
      b.addEventListener('click', async () => {
        b.disabled = true;
        try {
          const r = await api.retrySweep(id);
          toast(r.runs.length ? r.runs.length + ' member' + (r.runs.length === 1 ? '' : 's') + ' queued again' : 'No member to retry');
          await load();
        } catch (e) {
          toast('Cannot retry: ' + e.message, 'error');
          b.disabled = false;
        }
      });
      actions.appendChild(b);
    }
    if (mayChange() && p.running + p.queued > 0) {
      if (confirming) {
        const yes = h('button', { type: 'button', class: 'btn btn-danger solid btn-sm', id: 'confirm-cancel-sweep' }, 'Yes, cancel them');
        const no = h('button', { type: 'button', class: 'btn btn-ghost btn-sm' }, 'Keep running');
        yes.addEventListener('click', async () => {
          confirming = false;
          try {
            const r = await api.cancelSweep(id);
            toast('Cancel requested for ' + r.runs.length + ' member' + (r.runs.length === 1 ? '' : 's'));
          } catch (e) {
            toast('Cannot cancel: ' + e.message, 'error');
          }
          load();
        });
        no.addEventListener('click', () => { confirming = false; renderHead(); });
        actions.appendChild(h('span', { class: 'confirm', role: 'alertdialog', 'aria-label': 'Confirm cancel' },
          'Cancel ' + (p.running + p.queued) + ' members?', yes, no));
        setTimeout(() => yes.focus(), 0);
      } else {
        const b = h('button', { type: 'button', class: 'btn btn-danger btn-sm', id: 'cancel-sweep' }, 'Cancel sweep');
        b.addEventListener('click', () => { confirming = true; renderHead(); });
        actions.appendChild(b);
      }
    }
    actions.appendChild(h('a', { class: 'btn btn-sm', href: '/runs?sweep=' + encodeURIComponent(id), id: 'sweep-runs' }, 'All runs'));
    replace(head, h('div', { class: 'page-head' },
      h('div', { style: { minWidth: '0' } },
        h('div', { class: 'run-title' }, h('h1', { id: 'sweep-name' }, sw.name || sw.id)),
        h('div', { class: 'run-meta' },
          h('span', null, 'by ', h('strong', null, sw.user)),
          sw.project ? h('span', null, 'project ', h('a', { href: '/runs?project=' + encodeURIComponent(sw.project) }, sw.project)) : null,
          h('span', null, 'id ', h('code', null, sw.id)),
          h('span', null, sw.members + ' members' + (sw.maxParallel ? ', at most ' + sw.maxParallel + ' at once' : '')),
          h('span', null, 'submitted ' + fmtTime(parseTime(sw.createdAt))))),
      h('span', { class: 'spacer' }), actions));
    replace(progress, progressBar(sw.counts, sw.members, (sw.stops || []).length));
    ctx.setTitle(sw.name || sw.id);
  }

  // renderSearch shows what the search found: the best params (the IQM of
  // their seeds and its 95% interval), the importances as bars, each rung's
  // decisions, the members stopped early with why, and those that never
  // reported the metric (and those that ended without the objective).
  function renderSearch() {
    const stops = sw.stops || [];
    const imp = sw.importance || [];
    const unreported = sw.unreported || [];
    const noObjective = sw.noObjective || [];
    const searching = sw.method === 'tpe' || (sw.spec && sw.spec.earlyStop);
    search.hidden = !searching && !sw.best;
    if (search.hidden) return;
    const runLinks = (ids) => ids.map((rid, i) => [i ? ', ' : '', h('a', { href: '/runs/' + rid }, rid)]);
    const best = sw.best
      ? h('p', { id: 'sweep-best' }, 'Best ', h('strong', null, sw.metric || 'metric'), ': ', h('code', null, paramsLabel(sw.best.params, Object.keys(sw.best.params))),
        ' = ', h('strong', null, fmtNum(sw.best.value)), h('span', { class: 'muted' }, ' [' + fmtNum(sw.best.ci[0]) + ', ' + fmtNum(sw.best.ci[1]) + '] · runs '),
        runLinks(sw.best.runs))
      : h('p', { class: 'muted', id: 'sweep-best' }, 'No finished proposal with a value yet.');
    const top = imp.reduce((m, x) => Math.max(m, x.value), 0) || 1;
    const bars = imp.length
      ? h('table', { class: 'kvtable', id: 'sweep-importance' }, h('tbody', null, imp.map((x) => h('tr', null,
        h('td', { class: 'mono' }, x.param),
        h('td', { style: { width: '60%' } }, h('div', { class: 'bar', style: { width: Math.max(0, 100 * x.value / top) + '%', background: PALETTE[0], height: '0.7em' } })),
        h('td', { class: 'num' }, fmtNum(x.value))))))
      : h('p', { class: 'muted', id: 'sweep-importance' }, 'Importance needs 8 finished proposals.');
    const stopped = stops.length
      ? h('table', { class: 'kvtable', id: 'sweep-stops' }, h('tbody', null, stops.map((st) => h('tr', { dataset: { id: st.run } },
        h('td', null, h('a', { href: '/runs/' + st.run }, st.run)), h('td', null, st.error)))))
      : h('p', { class: 'muted', id: 'sweep-stops' }, 'No member stopped early.');
    // Each rung's kept decisions: how many continued and stopped there,
    // and the cut the latest member was judged against.
    const rungs = [];
    for (const d of sw.decisions || []) {
      let r = rungs[rungs.length - 1];
      if (!r || r.rung !== d.rung) rungs.push(r = { rung: d.rung, step: d.step, kept: 0, stopped: 0, cut: d.cut });
      if (d.stop) r.stopped++; else r.kept++;
      r.cut = d.cut;
    }
    const rungTable = rungs.length
      ? h('div', { class: 'table-wrap' }, h('table', { class: 'data', id: 'sweep-rungs' },
        h('thead', null, h('tr', null, h('th', null, 'rung'), h('th', { class: 'num' }, 'step'), h('th', { class: 'num' }, 'continued'),
          h('th', { class: 'num' }, 'stopped'), h('th', { class: 'num' }, 'last cut'))),
        h('tbody', null, rungs.map((r) => h('tr', { dataset: { rung: String(r.rung) } },
          h('td', null, String(r.rung)), h('td', { class: 'num' }, String(r.step)), h('td', { class: 'num' }, String(r.kept)),
          h('td', { class: 'num' }, String(r.stopped)), h('td', { class: 'num' }, fmtNum(r.cut)))))))
      : null;
    replace(search,
      h('div', { class: 'card-head' }, h('h2', null, 'Search'),
        h('span', { class: 'muted' }, sw.method === 'tpe' ? 'TPE: ' + sw.members + ' of ' + sw.budget + ' members proposed' : (sw.method || ''))),
      best, h('h3', null, 'Importance'), bars, rungTable ? [h('h3', null, 'Rungs'), rungTable] : null, h('h3', null, 'Stopped early'), stopped,
      unreported.length ? h('p', { class: 'muted', id: 'sweep-unreported' }, 'Never reported the early-stopping metric (not stopped for it): ', runLinks(unreported)) : null,
      noObjective.length ? h('p', { class: 'muted', id: 'sweep-no-objective' }, 'Ended without reporting ', h('code', null, sw.metric || 'the metric'),
        ' (no value, never best): ', runLinks(noObjective), sw.best ? '' : '. No member that ended reported it: is it the name the runs log?') : null);
  }

  function renderGroups() {
    const groups = sw.groups || [];
    const { varying, constant } = varyingKeys(groups.map((g) => g.params));
    const first = groups[0] ? groups[0].params : {};
    replace(constants, constant.length ? ['Every group: ', h('code', null, paramsLabel(first, constant))] : '');
    constants.hidden = !constant.length;
    const byID = new Map((sw.runs || []).map((t) => [t.id, t]));
    const body = h('tbody');
    groups.forEach((g, i) => {
      const key = keyOf(g.params);
      const isOpen = open.has(key);
      const sw0 = h('span', { class: 'swatch' });
      sw0.style.background = colorOf(key);
      const runsLink = h('a', { href: runsURL(g.params), title: 'These runs on the Runs page' }, g.runs.length + (g.runs.length === 1 ? ' run' : ' runs'));
      runsLink.addEventListener('click', (e) => e.stopPropagation());
      const toggle = h('button', { type: 'button', class: 'btn btn-ghost btn-icon btn-sm', 'aria-expanded': String(isOpen), 'aria-label': (isOpen ? 'Hide' : 'Show') + ' the runs of this group' }, isOpen ? '▾' : '▸');
      const fr = g.finalReward;
      const tr = h('tr', { class: ['group-row', isOpen && 'selected'], dataset: { key, rank: i + 1 } },
        h('td', { class: 'narrow toggle-cell', 'data-label': 'Group' }, h('span', null, toggle, sw0)),
        varying.map((k) => h('td', { class: 'mono', 'data-label': k, title: k in g.params ? paramText(g.params[k]) : null }, k in g.params ? paramShort(g.params[k]) : '—')),
        h('td', { class: 'num reward', 'data-label': 'Final reward' }, fr ? h('span', null, h('strong', null, fmtNum(fr.mean)), ' ± ', fmtNum(fr.std)) : h('span', { class: 'faint' }, '—')),
        h('td', { class: 'num', 'data-label': 'n' }, String(g.n)),
        h('td', { class: 'num hide-sm' }, fr ? fmtNum(fr.min) : ''),
        h('td', { class: 'num hide-sm' }, fr ? fmtNum(fr.max) : ''),
        h('td', { 'data-label': 'Members' }, h('div', { class: 'statuses' }, statusCounts(g.counts))),
        h('td', { class: 'nowrap', 'data-label': '' }, runsLink));
      tr.addEventListener('click', () => {
        if (open.has(key)) open.delete(key); else open.add(key);
        renderGroups();
        drawCurves();
      });
      body.appendChild(tr);
      if (isOpen) body.appendChild(h('tr', { class: 'members-row' }, h('td', { colspan: varying.length + 7 }, membersTable(g, byID))));
    });
    if (!groups.length) body.appendChild(h('tr', null, h('td', { colspan: varying.length + 7, class: 'muted' }, 'No members.')));
    // On a phone each group is a card (cards-sm), its params and reward
    // in sight rather than off to the side.
    replace(groupsBox, h('table', { class: 'data groups-table cards-sm' },
      h('thead', null, h('tr', null, h('th', { class: 'narrow' }, ''), varying.map((k) => h('th', null, k)),
        h('th', { class: 'num' }, 'Final reward (mean ± std)'), h('th', { class: 'num' }, 'n'), h('th', { class: 'num hide-sm' }, 'Min'),
        h('th', { class: 'num hide-sm' }, 'Max'), h('th', null, 'Members'), h('th', null, ''))),
      body));
  }

  // renderParams draws the groups with a mean final reward over their
  // varying params; a line's click opens its group below, as a row's does.
  function renderParams() {
    const all = sw.groups || [];
    const { varying } = varyingKeys(all.map((g) => g.params));
    const groups = all.filter((g) => g.finalReward && Number.isFinite(g.finalReward.mean))
      .map((g) => ({ key: keyOf(g.params), params: g.params, value: g.finalReward.mean }));
    paramsCard.hidden = !varying.length || groups.length < 2;
    if (paramsCard.hidden) return;
    const pick = (key) => {
      if (open.has(key)) open.delete(key); else open.add(key);
      renderGroups();
      drawCurves();
      const row = groupsBox.querySelector(`tr.group-row[data-key="${CSS.escape(key)}"]`);
      if (row) row.scrollIntoView({ block: 'nearest' });
    };
    // The groups' box is as wide as this card's (which may be hidden yet).
    const views = [h('div', { id: 'sweep-parcoords' }, parallelCoords(groups, varying, 'final reward', pick, groupsBox.clientWidth || Infinity))];
    let controls = null;
    if (varying.length >= 2) {
      if (!varying.includes(heatX)) heatX = varying[0];
      if (!varying.includes(heatY) || heatY === heatX) heatY = varying.find((k) => k !== heatX);
      const sel = (sid, label, cur, set) => {
        const el = h('select', { id: sid }, varying.map((k) => h('option', { value: k, selected: k === cur }, k)));
        el.addEventListener('change', () => { set(el.value); syncURL(); renderParams(); });
        return h('div', { class: 'field' }, h('label', { for: sid }, label), el);
      };
      controls = [sel('heat-x', 'x', heatX, (v) => { heatX = v; if (heatY === v) heatY = varying.find((k) => k !== v); }),
        sel('heat-y', 'y', heatY, (v) => { heatY = v; if (heatX === v) heatX = varying.find((k) => k !== v); })];
      views.push(h('div', { id: 'sweep-heatmap' }, heatmap(groups, heatX, heatY, 'final reward')));
    }
    replace(paramsCard,
      h('div', { class: 'card-head' }, h('h2', null, 'Params'),
        h('span', { class: 'muted' }, 'each group\'s mean final reward over its params, from purple (low) to yellow (high); click a line to open its group'),
        h('span', { class: 'spacer' }), controls),
      h('div', { class: ['params-views', views.length > 1 && 'two'] }, views));
  }

  // runsURL is the Runs page filtered to the sweep and a group's params.
  function runsURL(params) {
    const u = new URLSearchParams({ sweep: id });
    // As JSON, so a string value stays a string ("3" is not 3).
    for (const [k, v] of Object.entries(params)) u.set('param.' + k, JSON.stringify(v));
    return '/runs?' + u;
  }

  function membersTable(g, byID) {
    return h('table', { class: 'kvtable members' }, h('tbody', null, g.runs.map((rid) => {
      const t = byID.get(rid);
      if (!t) return h('tr', null, h('td', { colspan: 4 }, h('a', { href: '/runs/' + rid }, rid)));
      const p = paramsOf(t);
      return h('tr', { dataset: { id: rid } },
        h('td', null, h('a', { href: '/runs/' + rid }, t.name || rid)),
        h('td', { class: 'mono' }, 'seed' in p ? 'seed ' + paramText(p.seed) : ''),
        h('td', null, badge(t.status), t.attempt > 1 ? h('span', { class: 'faint' }, ' attempt ' + t.attempt) : null,
          t.rerunOf ? h('span', { class: 'faint' }, ' · retry of ', h('a', { href: '/runs/' + t.rerunOf }, t.rerunOf)) : null,
          t.reason === 'early_stopped' ? h('span', { class: 'faint stop-reason' }, ' · ' + t.error) : null),
        h('td', { class: 'num' }, t.finalReward != null ? fmtNum(t.finalReward) : h('span', { class: 'faint' }, '—')));
    })));
  }

  function drawCurves() {
    const { varying } = varyingKeys(curves.map((g) => g.params));
    // A group without points (its runs failed first, or have not reported
    // yet) has no curve.
    const series = curves.filter((g) => g.series.length).map((g) => {
      const key = keyOf(g.params);
      return {
        id: key,
        label: (paramsLabel(g.params, varying) || 'all') + ' · ' + g.runs.length + ' runs',
        color: colorOf(key),
        points: g.series.map((p) => [p[0], p[1]]),
        // [step, mean, std, n, min, max]: the band is clipped to min–max.
        band: band === 'none' ? null : g.series.map((p) => bandPoint(band, p[0], p[1], p[2], p[3], p[4], p[5])),
      };
    });
    chart.set(series);
    chart.hide(open.size ? series.filter((s) => !open.has(s.id)).map((s) => s.id) : []);
    const points = curves.reduce((a, g) => a + g.series.length, 0);
    curveNote.textContent = points ? 'Hover or use the arrow keys to read a step, drag to zoom (double-click to reset); click a group below to show only it.' : '';
  }

  function renderMetricSel() {
    const names = metricNames.length ? metricNames : [metric || 'episode_reward'];
    if (!metric) metric = names.includes('episode_reward') ? 'episode_reward' : names[0];
    replace(metricSel, names.map((n) => h('option', { value: n, selected: n === metric }, n)));
  }

  // The metric names come from a member that reported some.
  async function loadMetricNames() {
    for (const t of (sw.runs || []).filter((r) => r.startedAt).slice(0, 5)) {
      try {
        const r = await api.metrics(t.id, null, ac.signal);
        const names = Object.keys(r.series || {});
        if (names.length) {
          metricNames = names.sort((a, b) => (a === 'episode_reward' ? -1 : b === 'episode_reward' ? 1 : a.localeCompare(b)));
          if (metric && !metricNames.includes(metric)) metricNames.push(metric);
          renderMetricSel();
          return;
        }
      } catch { /* try the next */ }
    }
  }

  async function loadCurves() {
    try {
      const r = await api.sweepMetrics(id, metric || 'episode_reward', ac.signal);
      curves = r.groups || [];
      drawCurves();
    } catch (e) {
      if (e.name !== 'AbortError') curveNote.textContent = 'Cannot load the curves: ' + e.message;
    }
  }

  const active = () => sw && progressOf(sw.counts).running + progressOf(sw.counts).queued > 0;

  async function load() {
    try {
      sw = await api.sweep(id, ac.signal);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (!sw) {
        replace(root, e.status === 404
          ? h('div', { class: 'empty' }, h('strong', null, 'No sweep ' + id), h('a', { href: '/sweeps' }, 'Back to the sweeps'))
          : h('div', { class: 'notice error' }, 'Cannot load sweep ' + id + ': ' + e.message));
        destroy();
      }
      return;
    }
    if (destroyed) return;
    renderHead();
    renderSearch();
    renderGroups();
    renderParams();
    if (!metricNames.length) await loadMetricNames();
    renderMetricSel();
    await loadCurves();
  }

  const soon = debounce(load, 800);
  const unsub = live.subscribe('/topic/tasks', (m) => {
    if (m.type === 'subscribed' || m.type === 'lagged' || (m.type === 'task' && m.data && m.data.sweepId === id)) soon();
  });
  const stopPoll = poller(async () => { if (active()) await load(); }, 3000);

  function destroy() {
    if (destroyed) return;
    destroyed = true;
    ac.abort();
    unsub();
    stopPoll();
    soon.cancel();
    chart.destroy();
  }

  renderMetricSel();
  load();
  return destroy;
}
