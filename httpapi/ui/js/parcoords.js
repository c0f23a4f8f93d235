// A sweep's groups seen across their params (issue 35): parallel
// coordinates, an axis per varying param and one for the metric with a
// line per group coloured by its value, and a heatmap of the metric over
// two params. Both are SVG drawn from plain data, so the sweep page and
// tests give them the same input:
//   groups: [{ key, params: {name: value}, value: number }]
// where value is the group's mean final reward (groups without one are
// left out by the caller).

import { h, fmtNum, paramText } from './util.js';

// ramp colours a value's place t (0..1) from low (dark purple) to high
// (yellow): viridis, perceptually even, readable by the colour-blind and
// in both colour schemes, with no end that fades into the background.
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
export function ramp(t) {
  if (!Number.isFinite(t)) t = 0;
  t = Math.min(1, Math.max(0, t)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(t));
  const f = t - i;
  const c = RAMP[i].map((a, k) => Math.round(a + f * (RAMP[i + 1][k] - a)));
  return 'rgb(' + c.join(',') + ')';
}

// axisOf maps one param's values to 0..1: numbers on a linear scale, or a
// log scale when all are positive and span two decades or more; anything
// else as evenly spaced categories in their text order.
export function axisOf(values) {
  const present = values.filter((v) => v !== undefined);
  const nums = present.every((v) => typeof v === 'number' && Number.isFinite(v));
  if (nums && present.length) {
    const lo = Math.min(...present), hi = Math.max(...present);
    const log = lo > 0 && hi / lo >= 100;
    const f = log ? Math.log10 : (x) => x;
    const a = f(lo), b = f(hi);
    const pos = (v) => (typeof v !== 'number' ? null : b === a ? 0.5 : (f(v) - a) / (b - a));
    // Each value a group has when they are few (a grid's), else the ends.
    const distinct = [...new Set(present)].sort((p, q) => p - q);
    return { kind: log ? 'log' : 'linear', pos, ticks: distinct.length <= 6 ? distinct : [lo, hi], label: (v) => fmtNum(v) };
  }
  const cats = [...new Set(present.map(paramText))].sort((x, y) => x.localeCompare(y, 'en', { numeric: true }));
  const pos = (v) => {
    if (v === undefined) return null;
    const i = cats.indexOf(paramText(v));
    return cats.length === 1 ? 0.5 : i / (cats.length - 1);
  };
  return { kind: 'category', pos, ticks: cats, label: (v) => v, cats };
}

const svg = (tag, attrs, ...kids) => h('svg:' + tag, attrs, ...kids);

// parallelCoords draws groups over keys (the varying params) and a last
// axis of their value named metric. onPick(key) is called on a line's
// click.
//
// Lines leave the first axis rightwards and reach the metric's from the
// left, so the first axis's tick labels go on its left and the metric's on
// its right, in margins as wide as their longest label; a middle axis has
// lines on both sides, so its labels sit on a backing (pc-halo) drawn over
// them. It is drawn at its size, MIN_W wide or the avail px its box has
// when less (a phone), yet no narrower than 160 px an axis: its text is
// never scaled, and a box too narrow for its axes scrolls.
const MIN_W = 600;
export function parallelCoords(groups, keys, metric, onPick, avail = Infinity) {
  const axes = keys.map((k) => ({ name: k, axis: axisOf(groups.map((g) => g.params[k])) }));
  const vals = groups.map((g) => g.value);
  const vAxis = axisOf(vals);
  axes.push({ name: metric, axis: vAxis, metric: true });
  const n = axes.length;
  // About 7 px a character of the 11 px tick font, and room for the axis
  // name centred under the axis.
  const margin = (a) => Math.max(48, a.name.length * 4 + 8, ...a.axis.ticks.map((t) => String(a.axis.label(t)).length * 7 + 14));
  const W = Math.max(Math.min(MIN_W, avail), 160 * n), H = 280, top = 16, bottom = 40, left = margin(axes[0]), right = margin(axes[n - 1]);
  const x = (i) => left + (n === 1 ? 0 : (i * (W - left - right)) / (n - 1));
  const y = (p) => top + (1 - p) * (H - top - bottom);
  const el = svg('svg', { class: 'parcoords', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': 'Parallel coordinates of ' + groups.length + ' groups over ' + keys.join(', ') + ' and ' + metric,
    style: { maxWidth: W + 'px', minWidth: W + 'px' } }); // drawn at its size: the text neither grows nor shrinks
  // Lines first, the best last (drawn on top).
  const order = groups.map((g, i) => i).sort((a, b) => vals[a] - vals[b]);
  for (const gi of order) {
    const g = groups[gi];
    const pts = axes.map((a, i) => {
      const p = a.axis.pos(a.metric ? g.value : g.params[a.name]);
      return p == null ? null : [x(i), y(p)];
    });
    const d = pts.map((p, i) => (p ? (i && pts[i - 1] ? 'L' : 'M') + p[0].toFixed(1) + ',' + p[1].toFixed(1) : '')).join('');
    const line = svg('path', { class: 'pc-line', d, stroke: ramp(vAxis.pos(g.value)), dataset: { key: g.key } },
      svg('title', null, keys.map((k) => k + '=' + paramText(g.params[k])).join(' ') + ' → ' + metric + ' ' + fmtNum(g.value)));
    if (onPick) line.addEventListener('click', () => onPick(g.key));
    el.appendChild(line);
  }
  axes.forEach((a, i) => {
    const gx = x(i);
    const g = svg('g', { class: ['pc-axis', a.metric && 'pc-metric'], dataset: { name: a.name, scale: a.axis.kind } });
    g.appendChild(svg('line', { x1: gx, x2: gx, y1: top, y2: H - bottom }));
    for (const t of a.axis.ticks) {
      const p = a.axis.pos(t);
      if (p == null) continue;
      const first = i === 0, last = i === n - 1;
      g.appendChild(svg('text', { x: first ? gx - 6 : gx + 6, y: y(p) + 4, 'text-anchor': first ? 'end' : 'start',
        class: ['pc-tick', !first && !last && 'pc-halo'] }, String(a.axis.label(t))));
    }
    g.appendChild(svg('text', { x: gx, y: H - bottom + 20, class: 'pc-name', 'text-anchor': 'middle' },
      a.name + (a.axis.kind === 'log' ? ' (log)' : '')));
    el.appendChild(g);
  });
  return el;
}

// HEAT_BINS is how many ranges a heatmap cuts a numeric param with more
// distinct values into: a tpe or random sweep's draws are all distinct, and
// a column per draw would be a diagonal of single cells (the CLI's
// sweep show --heatmap cuts alike).
const HEAT_BINS = 6;

// heatAxis is one side of a heatmap: its labels in order, and of(v), the
// label of a group's value (null when it lacks the param). Each value when
// they are at most HEAT_BINS, else HEAT_BINS equal ranges on axisOf's scale.
export function heatAxis(groups, key) {
  const vals = groups.map((g) => g.params[key]);
  const axis = axisOf(vals);
  const each = (v) => (v === undefined ? null : paramText(v));
  if (axis.kind === 'category') return { labels: axis.cats, of: each };
  const distinct = [...new Set(vals.filter((v) => v !== undefined))].sort((a, b) => a - b);
  if (distinct.length <= HEAT_BINS) return { labels: distinct.map(paramText), of: each };
  const log = axis.kind === 'log';
  const f = log ? Math.log10 : (x) => x, back = log ? (x) => 10 ** x : (x) => x;
  const a = f(distinct[0]), b = f(distinct[distinct.length - 1]);
  const at = (i) => fmtNum(back(a + ((b - a) * i) / HEAT_BINS), 3);
  const labels = [...Array(HEAT_BINS).keys()].map((i) => at(i) + '–' + at(i + 1));
  return { labels, ranges: true, of: (v) => (typeof v !== 'number' ? null : labels[Math.min(HEAT_BINS - 1, Math.floor(((f(v) - a) / (b - a)) * HEAT_BINS))]) };
}

// heatmap draws the mean value of the groups at each pair of xKey and yKey
// values or ranges (heatAxis; groups that differ in other params are
// averaged), with the value written in each cell; pairs no group has are
// left blank.
export function heatmap(groups, xKey, yKey, metric) {
  const xs = heatAxis(groups, xKey), ys = heatAxis(groups, yKey);
  const xc = xs.labels, yc = ys.labels.slice().reverse(); // the largest y on top
  const cell = new Map();
  for (const g of groups) {
    const xv = xs.of(g.params[xKey]), yv = ys.of(g.params[yKey]);
    if (xv == null || yv == null) continue;
    const k = xv + '\u0000' + yv;
    const c = cell.get(k) || { sum: 0, n: 0 };
    c.sum += g.value;
    c.n++;
    cell.set(k, c);
  }
  const means = [...cell.values()].map((c) => c.sum / c.n);
  const lo = Math.min(...means), hi = Math.max(...means);
  const cw = Math.max(36, Math.min(90, 640 / Math.max(1, xc.length))), ch = 28, left = ys.ranges ? 96 : 70, top = 8, bottom = xs.ranges ? 54 : 40;
  const W = left + cw * xc.length + 8, H = top + ch * yc.length + bottom;
  const el = svg('svg', { class: 'heatmap', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': metric + ' over ' + xKey + ' and ' + yKey, style: { maxWidth: W + 'px' } });
  yc.forEach((yv, j) => {
    el.appendChild(svg('text', { x: left - 6, y: top + j * ch + ch / 2 + 4, 'text-anchor': 'end', class: 'pc-tick' }, yv));
    xc.forEach((xv, i) => {
      const c = cell.get(xv + '\u0000' + yv);
      const m = c ? c.sum / c.n : null;
      const t = m == null ? 0 : hi === lo ? 1 : (m - lo) / (hi - lo);
      const r = svg('rect', { x: left + i * cw, y: top + j * ch, width: cw - 2, height: ch - 2, rx: 3,
        class: ['heat-cell', m == null && 'empty'], fill: m == null ? 'none' : ramp(t), dataset: { x: xv, y: yv, value: m == null ? '' : String(m) } },
      svg('title', null, xKey + '=' + xv + ' ' + yKey + '=' + yv + (m == null ? ': no group' : ' → ' + metric + ' ' + fmtNum(m) + (c.n > 1 ? ' (mean of ' + c.n + ' groups)' : ''))));
      el.appendChild(r);
      if (m != null) {
        el.appendChild(svg('text', { x: left + i * cw + (cw - 2) / 2, y: top + j * ch + ch / 2 + 4, 'text-anchor': 'middle',
          class: ['heat-label', t < 0.6 && 'on-dark'] }, fmtNum(m, 3)));
      }
    });
  });
  // A range's ends on two lines: on one, six of them overlap.
  xc.forEach((xv, i) => {
    const x = left + i * cw + (cw - 2) / 2, y = top + yc.length * ch + 16;
    const [from, to] = xv.split('–');
    el.appendChild(svg('text', { x, y, 'text-anchor': 'middle', class: 'pc-tick' },
      xs.ranges ? [svg('tspan', { x }, from + '–'), svg('tspan', { x, dy: 12 }, to)] : xv));
  });
  el.appendChild(svg('text', { x: left + (cw * xc.length) / 2, y: H - 4, 'text-anchor': 'middle', class: 'pc-name' }, xKey));
  el.appendChild(svg('text', { x: 12, y: top + (ch * yc.length) / 2, class: 'pc-name', transform: `rotate(-90 12 ${top + (ch * yc.length) / 2})`, 'text-anchor': 'middle' }, yKey));
  return el;
}
