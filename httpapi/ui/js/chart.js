// A small SVG line chart: several series over a shared x axis, optional
// bands (mean ± spread, clipped to the range the runs reached), EMA
// smoothing with the raw line faint behind, linear or log y, drag (mouse
// or finger) to zoom (double-click or Reset to undo), x as steps or, for
// series of Unix seconds, as time since the start or the clock; a tooltip
// that follows the cursor and lists every visible series at that x (mouse,
// arrow keys or a tap), kept inside the plot so it never covers the
// legend; a legend that hides series and, with many, filters them. Long
// series are reduced to min/max per pixel column before drawing, so 100k
// points cost what 1k do.

import { h, clear, fmtNum } from './util.js';
import { niceTicks, logTicks, xAxis, X_MODES, fmtRelative, fmtWall } from './chartaxis.js';
import { downloadSVG, downloadPNG, downloadCSV } from './chartexport.js';

export { niceTicks } from './chartaxis.js';

const M = { top: 10, right: 14, bottom: 26, left: 52 };
const SVGNS = 'http://www.w3.org/2000/svg';
const LEGEND_FILTER_AT = 8; // series from which the legend offers a filter
const LEGEND_SHOWN = 12;    // entries a closed legend lists (small multiples stay small)
const ROW_PX = 18;          // a tooltip row's height, to fit the rows in the plot

function s(tag, attrs) {
  const el = document.createElementNS(SVGNS, tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, String(v));
  return el;
}

// reduce keeps, per pixel column, the first, min, max and last point, in x order.
function reduce(points, x, width) {
  if (points.length <= width * 2) return points;
  const out = [];
  let col = null, first, min, max, last;
  const flush = () => {
    if (col === null) return;
    const keep = [first, min, max, last].filter((p, i, a) => a.indexOf(p) === i);
    keep.sort((a, b) => a[0] - b[0]);
    out.push(...keep);
  };
  for (const p of points) {
    const c = Math.round(x(p[0]));
    if (c !== col) {
      flush();
      col = c; first = min = max = last = p;
    } else {
      if (p[1] < min[1]) min = p;
      if (p[1] > max[1]) max = p;
      last = p;
    }
  }
  flush();
  return out;
}

function nearest(points, xv) {
  let lo = 0, hi = points.length - 1;
  if (hi < 0) return null;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid][0] < xv) lo = mid + 1; else hi = mid;
  }
  if (lo > 0 && Math.abs(points[lo - 1][0] - xv) <= Math.abs(points[lo][0] - xv)) lo--;
  return points[lo];
}

// pathOf draws pts, starting a new piece after a point left out (null).
function pathOf(pts, x, y) {
  let d = '', pen = false, n = 0;
  for (const p of pts) {
    if (p == null) { pen = false; continue; }
    d += (pen ? 'L' : 'M') + x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1);
    pen = true; n++;
  }
  // A lone point (a run that logged one step) is a ring, visible at any width.
  if (n === 1) { const p = pts.find(Boolean); d = `M${(x(p[0]) - 3).toFixed(1)},${y(p[1]).toFixed(1)}a3,3 0 1,0 6,0a3,3 0 1,0 -6,0`; }
  return d;
}

// ema smooths points with an exponential moving average (0: none),
// debiased at the start as TensorBoard's slider is.
export function ema(points, a) {
  if (!a) return points;
  let m = 0, w = 0;
  return points.map(([px, py]) => {
    m = a * m + (1 - a) * py;
    w = a * w + (1 - a);
    return [px, m / w];
  });
}

// BANDS are the spreads a group's line may carry; bandPoint is one step's
// [x, lo, hi, n, min, max] of a kind, from the step's mean, sample std,
// count and range (the 95% interval is the normal one of the mean).
export const BANDS = [['std', '± std'], ['ci', '95% interval of the mean'], ['minmax', 'min–max'], ['none', 'no band']];
export function bandPoint(kind, x, m, sd, n, mn, mx) {
  if (kind === 'ci') { const e = 1.96 * sd / Math.sqrt(n); return [x, m - e, m + e, n, mn, mx]; }
  if (kind === 'minmax') return [x, mn, mx, n, mn, mx];
  return [x, m - sd, m + sd, n, mn, mx];
}

// clipBand bounds each [x, lo, hi, n, min, max] to its min and max (what
// the runs reached there), or to clip [lo, hi] when it has none: a mean ±
// std band never shows values no run had.
export function clipBand(band, clip) {
  return band.map((b) => {
    let lo = b[1], hi = b[2];
    const mn = b[4] != null ? b[4] : clip && clip[0];
    const mx = b[5] != null ? b[5] : clip && clip[1];
    if (mn != null && Number.isFinite(mn)) { lo = Math.max(lo, mn); hi = Math.max(hi, mn); }
    if (mx != null && Number.isFinite(mx)) { hi = Math.min(hi, mx); lo = Math.min(lo, mx); }
    return [b[0], lo, hi, b[3]];
  });
}

export class LineChart {
  // opts: title, name, height, empty (text when no data), legend (bool),
  // xKind ('step', or 'time': x values are Unix seconds; a step chart whose
  // points carry a third element, the Unix second each was logged at, also
  // offers the time modes, on those seconds), origin (the relative mode's
  // zero, Unix seconds; default the first x), tools (the bar of
  // log / x axis / reset / export; default true), onView(view) when the
  // user changes the scale, the x axis or the zoom.
  constructor(opts = {}) {
    this.opts = { height: 220, empty: 'No points yet', legend: true, xKind: 'step', tools: true, ...opts };
    this.series = [];
    this.hidden = new Set();
    this.filter = '';
    this.hoverX = null;
    this.hoverY = null;
    this.smoothing = 0;
    this.view = { yLog: false, xMode: this.opts.xKind === 'time' ? 'relative' : 'step', zoom: null };
    const name = opts.name || opts.title || '';
    this.el = h('div', { class: 'chart', dataset: { chart: name } });
    this.lastEl = h('span', { class: 'last' });
    this.toolsEl = h('span', { class: 'chart-tools' });
    if (opts.title || this.opts.tools) {
      this.el.appendChild(h('div', { class: 'chart-title' }, opts.title ? h('span', { class: 'chart-name' }, opts.title) : null, this.lastEl, this.toolsEl));
    }
    this.plotEl = h('div', { class: 'chart-plot' });
    this.svg = s('svg', { role: 'img', tabindex: '0', 'aria-label': (opts.title || 'chart') + ': use the arrow keys to read values, drag to zoom, double-click to reset' });
    this.tip = h('div', { class: 'chart-tip', hidden: true });
    this.plotEl.append(this.svg, this.tip);
    this.el.appendChild(this.plotEl);
    this.legendEl = h('div', { class: 'legend' });
    this.el.appendChild(this.legendEl);
    if (this.opts.tools) this.buildTools();
    this.width = 0;
    this.ro = new ResizeObserver(() => {
      const w = this.plotEl.clientWidth;
      if (w && w !== this.width) { this.width = w; this.render(); }
    });
    this.ro.observe(this.plotEl);
    this.svg.addEventListener('mousemove', (e) => this.onMove(e));
    this.svg.addEventListener('mouseleave', () => { this.hoverX = null; this.endDrag(null); this.drawHover(); });
    this.svg.addEventListener('mousedown', (e) => this.startDrag(e));
    this.svg.addEventListener('mouseup', (e) => this.endDrag(e));
    this.svg.addEventListener('dblclick', () => this.setZoom(null));
    this.svg.addEventListener('keydown', (e) => this.onKey(e));
    this.svg.addEventListener('blur', () => { this.hoverX = null; this.drawHover(); });
    // A finger: a tap shows the tooltip there, a sideways drag zooms (the
    // svg's touch-action leaves vertical pans to the page), Reset undoes.
    const finger = (e) => e.touches[0] || e.changedTouches[0];
    this.svg.addEventListener('touchstart', (e) => {
      if (e.touches.length !== 1) { this.endDrag(null); return; }
      const t = finger(e);
      this.onMove(t);
      this.startDrag({ button: 0, clientX: t.clientX, clientY: t.clientY, preventDefault() {} });
    }, { passive: true });
    this.svg.addEventListener('touchmove', (e) => { if (this.drag) this.onMove(finger(e)); }, { passive: true });
    this.svg.addEventListener('touchend', (e) => { if (this.drag) this.endDrag(finger(e)); });
    this.svg.addEventListener('touchcancel', () => this.endDrag(null));
  }

  destroy() { this.ro.disconnect(); }

  buildTools() {
    const b = (cls, text, title) => h('button', { type: 'button', class: 'btn btn-ghost btn-xs ' + cls, title }, text);
    this.logBtn = b('chart-log', 'log', 'Log scale for y');
    this.logBtn.setAttribute('aria-pressed', 'false');
    this.logBtn.addEventListener('click', () => this.changeView({ yLog: !this.view.yLog }));
    this.xSel = h('select', { class: 'chart-x', 'aria-label': 'x axis' });
    this.xSel.addEventListener('change', () => this.changeView({ xMode: this.xSel.value, zoom: null }));
    this.resetBtn = b('chart-reset', 'Reset zoom', 'Show the whole x range (or double-click the chart)');
    this.resetBtn.hidden = true;
    this.resetBtn.addEventListener('click', () => this.setZoom(null));
    const name = (this.opts.name || this.opts.title || 'chart').replace(/[^A-Za-z0-9_.-]+/g, '_');
    const menu = h('details', { class: 'chart-export' }, h('summary', { title: 'Export this chart' }, 'Export'),
      h('div', { class: 'menu' },
        h('button', { type: 'button', onclick: () => downloadSVG(this.svg, name) }, 'SVG'),
        h('button', { type: 'button', onclick: () => downloadPNG(this.svg, name) }, 'PNG'),
        h('button', { type: 'button', onclick: () => downloadCSV(this.csvRows(), name) }, 'CSV')));
    this.toolsEl.append(this.resetBtn, this.xSel, this.logBtn, menu);
    this.renderXSel();
  }

  renderXSel() {
    if (!this.xSel) return;
    const modes = this.modes();
    replace(this.xSel, modes.map((m) => h('option', { value: m, selected: m === this.xMode() }, X_MODES[m].title)));
    this.xSel.hidden = modes.length < 2;
  }

  // modes are the x axes the chart offers now: the time modes on a step
  // chart once some point has its time.
  modes() {
    if (this.opts.xKind === 'time') return ['relative', 'wall'];
    return this.timed ? ['step', 'relative', 'wall'] : ['step'];
  }

  // xMode is the axis drawn: the one asked for when offered (a time mode
  // asked for before the times arrived waits for them), else the first.
  xMode() {
    const m = this.modes();
    return m.includes(this.view.xMode) ? this.view.xMode : m[0];
  }

  // xOf is where a point lies on the chosen axis's source: its logged
  // second in a step chart's time mode (undefined: not drawn there).
  xOf(p) {
    return this.opts.xKind !== 'time' && this.xMode() !== 'step' ? p[2] : p[0];
  }

  // set replaces the series: [{id, label, color, points:[[x,y,t?]...],
  // band:[[x,lo,hi,n?,min?,max?]...], clip:[lo,hi]?, origin?}]; a series'
  // origin (Unix seconds, its run's start) is its own zero in relative time.
  // set draws series and, when given, marks ([{step, label}]): a dashed
  // vertical line with a label at each step, where a run's attempt
  // resumed, say (steps only: on a time axis they are left out).
  set(series, marks) {
    this.series = series.map((sr) => ({ ...sr, points: (sr.points || []).filter((p) => p && Number.isFinite(p[0]) && Number.isFinite(p[1])) }));
    if (marks !== undefined) this.marks = marks.filter((m) => m && Number.isFinite(m.step));
    const timed = this.series.some((sr) => sr.points.some((p) => Number.isFinite(p[2])));
    if (timed !== this.timed) { this.timed = timed; this.renderXSel(); }
    this.render();
  }

  // setSmoothing sets the EMA weight (0 to 0.99) of every series.
  setSmoothing(a) {
    this.smoothing = Math.min(0.999, Math.max(0, Number(a) || 0));
    this.render();
  }

  // setView applies {yLog, xMode, zoom} (each optional) without calling onView.
  setView(v) {
    if (v.xMode && !X_MODES[v.xMode]) v = { ...v, xMode: undefined };
    this.view = { ...this.view, ...Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined)) };
    this.renderXSel();
    this.render();
  }

  changeView(v) {
    this.setView(v);
    if (this.opts.onView) this.opts.onView({ ...this.view });
  }

  setZoom(z) { this.changeView({ zoom: z }); }

  visible() {
    let re = null;
    if (this.filter) { try { re = new RegExp(this.filter, 'i'); } catch { re = null; } }
    return this.series.filter((sr) => !this.hidden.has(sr.id) && (!re || re.test(sr.label || sr.id)));
  }

  // hide hides the series of ids (and shows the others), as the legend does.
  hide(ids) {
    this.hidden = new Set(ids);
    this.render();
  }

  // prepared is each visible series in axis units: line (smoothed), raw
  // (when smoothed) and its band, clipped.
  prepared(ax) {
    return this.visible().map((sr) => {
      const shift = ax.time && this.xMode() === 'relative' && sr.origin != null ? sr.origin - this.origin : 0;
      const pts = [];
      for (const p of sr.points) { const x = this.xOf(p); if (Number.isFinite(x)) pts.push([ax.value(x - shift), p[1]]); }
      const line = this.smoothing ? ema(pts, this.smoothing) : pts;
      let band = null;
      // A band is by step: a step chart drawn on time leaves it out.
      if (sr.band && sr.band.length && (this.opts.xKind === 'time' || this.xMode() === 'step')) {
        let b = sr.band.filter((p) => Number.isFinite(p[0]) && Number.isFinite(p[1]) && Number.isFinite(p[2])).map((p) => [ax.value(p[0]), ...p.slice(1)]);
        if (this.smoothing) {
          // The band's ends and its bounds smoothed alike: values within
          // [min, max] at every step stay within their smoothed bounds.
          const sm = (k) => ema(b.map((p) => [p[0], p[k] ?? NaN]), this.smoothing);
          const [lo, hi, mn, mx] = [1, 2, 4, 5].map((k) => (k < 4 || b.every((p) => p[k] != null) ? sm(k) : null));
          b = b.map((p, i) => [p[0], lo[i][1], hi[i][1], p[3], mn ? mn[i][1] : p[4], mx ? mx[i][1] : p[5]]);
        }
        let clip = sr.clip;
        if (!clip && pts.length) clip = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
        band = clipBand(b, clip);
      }
      return { sr, line, raw: this.smoothing ? pts : null, band };
    });
  }

  render() {
    const svg = this.svg;
    clear(svg);
    const W = this.width || this.plotEl.clientWidth || 600;
    const H = this.opts.height;
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    svg.setAttribute('height', H);
    this.renderLegend();
    let origin = this.opts.origin;
    if (origin == null) for (const sr of this.series) for (const p of sr.points) if (Number.isFinite(this.xOf(p))) { origin = Math.min(origin ?? Infinity, this.xOf(p)); break; }
    this.origin = origin ?? 0;
    const ax = xAxis(this.xMode(), this.origin);
    const data = this.prepared(ax);
    const zoom = this.view.zoom;
    const inX = (xv) => !zoom || (xv >= zoom[0] && xv <= zoom[1]);
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity, n = 0, positive = false, pMin = Infinity;
    for (const d of data) {
      for (const set of [d.line, d.raw || []]) {
        for (const p of set) {
          if (!inX(p[0])) continue;
          x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0]);
          if (p[1] > 0) { positive = true; pMin = Math.min(pMin, p[1]); }
          if (this.view.yLog && !(p[1] > 0)) continue;
          y0 = Math.min(y0, p[1]); y1 = Math.max(y1, p[1]);
          if (set === d.line) n++;
        }
      }
      for (const b of d.band || []) {
        if (!inX(b[0])) continue;
        if (!this.view.yLog || b[1] > 0) y0 = Math.min(y0, b[1]);
        if (!this.view.yLog || b[2] > 0) y1 = Math.max(y1, b[2]);
      }
    }
    if (zoom) { x0 = zoom[0]; x1 = zoom[1]; }
    if (this.logBtn) {
      this.logBtn.disabled = !positive && !this.view.yLog;
      this.logBtn.title = positive ? 'Log scale for y (values at or below 0 are left out)' : 'Log scale needs values above 0';
      this.logBtn.setAttribute('aria-pressed', String(this.view.yLog));
      this.resetBtn.hidden = !zoom;
    }
    svg.dataset.ylog = this.view.yLog ? '1' : '0';
    svg.dataset.xmode = this.xMode();
    svg.dataset.zoom = zoom ? zoom.map((v) => fmtNum(v, 6)).join(',') : '';
    const first = this.series[0];
    const lp = first && first.points[first.points.length - 1];
    this.lastEl.textContent = lp && this.series.length === 1 && this.opts.title && Number.isFinite(this.xOf(lp)) ? 'last ' + fmtNum(lp[1]) + ' @ ' + this.fmtX(ax.value(this.xOf(lp)), ax, 0) : '';
    if (n === 0) {
      const t = s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty-note' });
      t.textContent = this.view.yLog && this.series.some((sr) => sr.points.length) ? 'No values above 0 to show on a log scale' : this.opts.empty;
      svg.appendChild(t);
      svg.dataset.points = '0';
      this.scale = null;
      return;
    }
    svg.dataset.points = String(n);
    const pw = Math.max(10, W - M.left - M.right), ph = Math.max(10, H - M.top - M.bottom);
    const log = this.view.yLog;
    const yt = log ? logTicks(y0, y1) : niceTicks(y0, y1, Math.max(2, Math.round(ph / 45)));
    const [xlo, xhi] = x1 > x0 ? [x0, x1] : [x0 - 1, x0 + 1]; // a lone x in the middle
    const xt = ax.ticks(xlo, xhi, Math.max(2, Math.round(pw / 90)));
    const x = (v) => M.left + ((v - xlo) / (xhi - xlo)) * pw;
    const ty = log ? (v) => Math.log10(v) : (v) => v;
    const y = (v) => M.top + ph - ((ty(v) - yt.lo) / (yt.hi - yt.lo)) * ph;
    this.scale = { x, y, xlo, xhi, pw, ph, W, H, ax, data, log };

    const grid = s('g', { class: 'grid' });
    const axis = s('g', { class: 'axis' });
    for (const v of yt.ticks) {
      const yy = Math.round(y(v)) + 0.5;
      grid.appendChild(s('line', { x1: M.left, x2: M.left + pw, y1: yy, y2: yy }));
      const t = s('text', { x: M.left - 8, y: yy + 3.5, 'text-anchor': 'end' });
      t.textContent = fmtNum(v, 3);
      axis.appendChild(t);
    }
    for (const v of xt.ticks) {
      if (v < xlo - 1e-9 || v > xhi + 1e-9) continue;
      const xx = Math.round(x(v)) + 0.5;
      grid.appendChild(s('line', { x1: xx, x2: xx, y1: M.top, y2: M.top + ph }));
      const t = s('text', { x: xx, y: M.top + ph + 16, 'text-anchor': 'middle' });
      t.textContent = ax.fmt(v, xhi - xlo);
      axis.appendChild(t);
    }
    const xl = s('text', { x: M.left + pw, y: H - 2, 'text-anchor': 'end', class: 'axis-label' });
    xl.textContent = ax.time ? ax.label : (this.opts.xLabel || ax.label);
    svg.append(grid, axis, xl);

    const clipId = 'clip' + Math.random().toString(36).slice(2);
    const defs = s('defs');
    const cp = s('clipPath', { id: clipId });
    cp.appendChild(s('rect', { x: M.left, y: M.top - 2, width: pw, height: ph + 4 }));
    defs.appendChild(cp);
    svg.appendChild(defs);
    const plot = s('g', { 'clip-path': `url(#${clipId})` });
    svg.appendChild(plot);
    const keep = (p) => (log && !(p[1] > 0) ? null : p);

    for (const d of data) {
      const sr = d.sr;
      const b = (d.band || []).filter((p) => !log || p[1] > 0);
      if (b.length) {
        let path;
        if (b.length > 1) {
          path = 'M' + b.map((p) => x(p[0]).toFixed(1) + ',' + y(p[2]).toFixed(1)).join('L');
          path += 'L' + b.slice().reverse().map((p) => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join('L') + 'Z';
        } else { // a band of one step is a bar 8 px wide, as an error bar
          const [p] = b;
          path = `M${(x(p[0]) - 4).toFixed(1)},${y(p[2]).toFixed(1)}h8V${y(p[1]).toFixed(1)}h-8Z`;
        }
        const band = s('path', { d: path, class: 'band', fill: sr.color });
        band.dataset.series = sr.id;
        band.dataset.lo = String(Math.min(...b.map((p) => p[1])));
        band.dataset.hi = String(Math.max(...b.map((p) => p[2])));
        plot.appendChild(band);
      }
      if (d.raw && d.raw.length > 1) {
        plot.appendChild(s('path', { d: pathOf(reduce(d.raw, x, pw).map(keep), x, y), class: 'line raw', stroke: sr.color }));
      }
      if (!d.line.length) continue; // a series without points (yet) draws nothing
      const path = s('path', { d: pathOf(reduce(d.line, x, pw).map(keep), x, y), class: 'line', stroke: sr.color });
      path.dataset.points = String(sr.points.length);
      path.dataset.series = sr.id;
      plot.appendChild(path);
    }
    if (!ax.time) for (const mk of this.marks || []) {
      if (mk.step < xlo || mk.step > xhi) continue;
      const xx = Math.round(x(mk.step)) + 0.5;
      const g = s('g', { class: 'mark' });
      g.dataset.step = String(mk.step);
      g.appendChild(s('line', { x1: xx, x2: xx, y1: M.top, y2: M.top + ph }));
      const t = s('text', { x: xx + 4, y: M.top + 10 });
      t.textContent = mk.label || '';
      g.appendChild(t);
      svg.appendChild(g);
    }
    this.selRect = s('rect', { class: 'zoom-sel', x: 0, y: M.top, width: 0, height: ph, visibility: 'hidden' });
    svg.appendChild(this.selRect);
    this.hoverG = s('g', { class: 'hover' });
    svg.appendChild(this.hoverG);
    this.drawHover();
  }

  fmtX(v, ax, span) {
    if (ax.time) return this.xMode() === 'wall' ? fmtWall(v, span > 2 * 86400 ? 'date' : true) : fmtRelative(v);
    return fmtNum(v);
  }

  renderLegend() {
    clear(this.legendEl);
    if (!this.opts.legend || this.series.length < 2) { this.legendEl.hidden = true; return; }
    this.legendEl.hidden = false;
    if (this.series.length >= LEGEND_FILTER_AT) {
      const f = h('input', { type: 'search', class: 'legend-filter', placeholder: 'Filter (regex)', 'aria-label': 'Filter the series', value: this.filter });
      f.addEventListener('input', () => {
        this.filter = f.value;
        this.render();
        const again = this.legendEl.querySelector('.legend-filter');
        if (again) { again.focus(); again.setSelectionRange(again.value.length, again.value.length); }
      });
      this.legendEl.appendChild(f);
    }
    const vis = new Set(this.visible().map((sr) => sr.id));
    // A long legend lists its first entries, the filter's matches first;
    // the rest is a click away.
    let entries = this.series;
    if (this.filter) entries = [...entries.filter((sr) => vis.has(sr.id)), ...entries.filter((sr) => !vis.has(sr.id))];
    const cut = !this.legendOpen && entries.length > LEGEND_SHOWN + 1;
    if (cut) entries = entries.slice(0, LEGEND_SHOWN);
    for (const sr of entries) {
      const on = vis.has(sr.id);
      const b = h('button', { type: 'button', 'aria-pressed': String(on), title: sr.label + ' (double-click: only this one)', dataset: { series: sr.id } },
        h('span', { class: 'swatch', style: { background: sr.color } }), h('span', { class: 'lbl' }, sr.label));
      b.addEventListener('click', () => {
        if (this.hidden.has(sr.id)) this.hidden.delete(sr.id); else this.hidden.add(sr.id);
        this.render();
      });
      b.addEventListener('dblclick', () => {
        this.hidden = new Set(this.series.filter((o) => o.id !== sr.id).map((o) => o.id));
        this.render();
      });
      this.legendEl.appendChild(b);
    }
    if (cut || this.legendOpen) {
      const more = h('button', { type: 'button', class: 'legend-more' }, cut ? '+ ' + (this.series.length - LEGEND_SHOWN) + ' more' : 'fewer');
      more.addEventListener('click', () => { this.legendOpen = !cut ? false : true; this.renderLegend(); });
      if (this.series.length > LEGEND_SHOWN + 1) this.legendEl.appendChild(more);
    }
  }

  // The pointer in the plot's units: x data value, y pixel.
  pointer(e) {
    const r = this.svg.getBoundingClientRect();
    const k = this.scale.W / r.width;
    const px = (e.clientX - r.left) * k, py = (e.clientY - r.top) * k;
    const { xlo, xhi, pw } = this.scale;
    return { px, py, xv: xlo + ((px - M.left) / pw) * (xhi - xlo) };
  }

  onMove(e) {
    if (!this.scale) return;
    const p = this.pointer(e);
    this.hoverX = p.xv;
    this.hoverY = p.py;
    if (this.drag) {
      const a = Math.max(M.left, Math.min(this.drag.px, p.px)), b = Math.min(M.left + this.scale.pw, Math.max(this.drag.px, p.px));
      this.selRect.setAttribute('x', a);
      this.selRect.setAttribute('width', Math.max(0, b - a));
      this.selRect.setAttribute('visibility', 'visible');
    }
    this.drawHover();
  }

  startDrag(e) {
    if (!this.scale || e.button !== 0) return;
    e.preventDefault();
    this.svg.focus({ preventScroll: true });
    const p = this.pointer(e);
    this.drag = { px: p.px, xv: p.xv };
  }

  endDrag(e) {
    const d = this.drag;
    this.drag = null;
    if (this.selRect) this.selRect.setAttribute('visibility', 'hidden');
    if (!d || !e || !this.scale) return;
    const p = this.pointer(e);
    if (Math.abs(p.px - d.px) < 5) return; // a click, not a drag
    const { xlo, xhi } = this.scale;
    const a = Math.max(xlo, Math.min(d.xv, p.xv)), b = Math.min(xhi, Math.max(d.xv, p.xv));
    if (b > a) this.setZoom([a, b]);
  }

  onKey(e) {
    if (!this.scale) return;
    const { xlo, xhi } = this.scale;
    const step = (xhi - xlo) / 50;
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      e.preventDefault();
      const cur = this.hoverX ?? (e.key === 'ArrowRight' ? xlo - step : xhi + step);
      this.hoverX = Math.min(xhi, Math.max(xlo, cur + (e.key === 'ArrowRight' ? step : -step)));
      this.hoverY = null;
      this.drawHover();
    } else if (e.key === 'Home' || e.key === 'End') {
      e.preventDefault();
      this.hoverX = e.key === 'Home' ? xlo : xhi;
      this.drawHover();
    } else if (e.key === 'Escape') {
      if (this.view.zoom) this.setZoom(null);
      this.hoverX = null;
      this.drawHover();
    }
  }

  drawHover() {
    const g = this.hoverG;
    if (!g) return;
    clear(g);
    if (this.hoverX == null || !this.scale) { this.tip.hidden = true; return; }
    const { x, y, xlo, xhi, ph, W, ax, data, log } = this.scale;
    const xv = Math.min(xhi, Math.max(xlo, this.hoverX));
    const rows = [];
    let at = null;
    for (const d of data) {
      const p = nearest(d.line, xv);
      if (!p) continue;
      at ??= p[0];
      if (!log || p[1] > 0) g.appendChild(s('circle', { cx: x(p[0]), cy: y(p[1]), r: 3.5, fill: d.sr.color, class: 'pt' }));
      let value = fmtNum(p[1]);
      const raw = d.raw && nearest(d.raw, p[0]);
      if (raw && raw[0] === p[0] && raw[1] !== p[1]) value += ' (raw ' + fmtNum(raw[1]) + ')';
      const b = d.band && nearest(d.band, p[0]);
      if (b && b[0] === p[0]) value += ' [' + fmtNum(b[1]) + ', ' + fmtNum(b[2]) + ']' + (b[3] != null ? ' n ' + b[3] : '');
      rows.push({ v: p[1], el: h('div', { class: 'r' }, h('span', { class: 'swatch', style: { background: d.sr.color } }), h('span', { class: 'lbl' }, d.sr.label || ''), h('b', null, value)) });
    }
    if (at == null) { this.tip.hidden = true; return; }
    const cx = x(at);
    g.insertBefore(s('line', { x1: cx, x2: cx, y1: M.top, y2: M.top + ph, class: 'cross' }), g.firstChild);
    rows.sort((a, b) => b.v - a.v);
    const plotH = this.plotEl.clientHeight || this.opts.height;
    const fit = Math.max(1, Math.floor((plotH - 34) / ROW_PX));
    const shown = rows.length > fit ? rows.slice(0, fit - 1) : rows;
    clear(this.tip);
    this.tip.append(h('div', { class: 't' }, (ax.time ? ax.label + ' ' : (this.opts.xLabel || 'step') + ' ') + this.fmtX(at, ax, xhi - xlo)), ...shown.map((r) => r.el));
    if (shown.length < rows.length) this.tip.appendChild(h('div', { class: 'more' }, '+ ' + (rows.length - shown.length) + ' more'));
    this.tip.hidden = false;
    this.tip.style.maxHeight = plotH + 'px';
    const k = this.svg.getBoundingClientRect().width / W;
    const left = cx * k;
    const tw = this.tip.offsetWidth, th = this.tip.offsetHeight;
    const boxW = this.plotEl.clientWidth;
    let lx = left + 14 + tw > boxW ? left - 14 - tw : left + 14;
    lx = Math.max(0, Math.min(lx, boxW - tw));
    const py = this.hoverY == null ? M.top : this.hoverY * k - th / 2;
    this.tip.style.left = lx + 'px';
    this.tip.style.top = Math.max(0, Math.min(py, plotH - th)) + 'px';
  }

  // csvRows are the visible series' points as drawn (smoothed when set).
  csvRows() {
    const ax = xAxis(this.xMode(), this.origin ?? 0);
    const rows = [['series', ax.time ? (this.xMode() === 'wall' ? 'unix_seconds' : 'seconds') : 'step', 'value', 'band_lo', 'band_hi']];
    for (const d of this.prepared(ax)) {
      for (const p of d.line) {
        const b = d.band && nearest(d.band, p[0]);
        rows.push([d.sr.label || d.sr.id, p[0], p[1], b && b[0] === p[0] ? b[1] : '', b && b[0] === p[0] ? b[2] : '']);
      }
    }
    return rows;
  }
}

function replace(el, children) {
  clear(el);
  for (const c of children) el.appendChild(c);
}

// smoothingControl is TensorBoard's slider: an EMA weight from 0 to 0.99
// for the charts of a page; onChange gets the new weight.
export function smoothingControl(id, value, onChange) {
  const out = h('output', { for: id, class: 'smooth-value' }, String(value || 0));
  const r = h('input', { type: 'range', id, min: '0', max: '0.99', step: '0.01', value: String(value || 0), 'aria-label': 'Smoothing' });
  r.addEventListener('input', () => { out.textContent = r.value; onChange(Number(r.value)); });
  return h('div', { class: 'field smooth-field' }, h('label', { for: id }, 'Smoothing'), h('div', { class: 'smooth-row' }, r, out));
}
