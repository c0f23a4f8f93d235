// A small SVG line chart: several series over a shared x axis, optional
// bands (mean ± spread), a crosshair with a tooltip (mouse and arrow keys),
// a legend that hides series. Long series are reduced to min/max per pixel
// column before drawing, so 100k points cost what 1k do.

import { h, clear, fmtNum } from './util.js';

const M = { top: 10, right: 14, bottom: 26, left: 52 };
const SVGNS = 'http://www.w3.org/2000/svg';

function s(tag, attrs) {
  const el = document.createElementNS(SVGNS, tag);
  if (attrs) for (const [k, v] of Object.entries(attrs)) if (v != null) el.setAttribute(k, String(v));
  return el;
}

export function niceTicks(min, max, count) {
  if (!(max > min)) {
    const d = Math.abs(min) > 0 ? Math.abs(min) * 0.1 : 1;
    min -= d; max += d;
  }
  const raw = (max - min) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const f = raw / mag;
  const step = (f >= 7.5 ? 10 : f >= 3.5 ? 5 : f >= 1.5 ? 2 : 1) * mag;
  const lo = Math.floor(min / step) * step;
  const hi = Math.ceil(max / step) * step;
  const ticks = [];
  for (let v = lo, i = 0; v <= hi + step * 1e-6 && i < 100; v += step, i++) ticks.push(Number(v.toPrecision(12)));
  return { lo, hi, ticks, step };
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

export class LineChart {
  // opts: title, height, xLabel, empty (text when no data), legend (bool).
  constructor(opts = {}) {
    this.opts = { height: 220, xLabel: 'step', empty: 'No points yet', legend: true, ...opts };
    this.series = [];
    this.hidden = new Set();
    this.hoverX = null;
    this.el = h('div', { class: 'chart', dataset: { chart: opts.name || opts.title || '' } });
    if (opts.title) {
      this.lastEl = h('span', { class: 'last' });
      this.el.appendChild(h('div', { class: 'chart-title' }, h('span', null, opts.title), this.lastEl));
    }
    this.svg = s('svg', { role: 'img', tabindex: '0', 'aria-label': (opts.title || 'chart') + ': use the arrow keys to read values' });
    this.el.appendChild(this.svg);
    this.tip = h('div', { class: 'chart-tip', hidden: true });
    this.el.appendChild(this.tip);
    this.legendEl = h('div', { class: 'legend' });
    this.el.appendChild(this.legendEl);
    this.width = 0;
    this.ro = new ResizeObserver(() => {
      const w = this.el.clientWidth;
      if (w && w !== this.width) { this.width = w; this.render(); }
    });
    this.ro.observe(this.el);
    this.svg.addEventListener('mousemove', (e) => this.onMove(e));
    this.svg.addEventListener('mouseleave', () => { this.hoverX = null; this.drawHover(); });
    this.svg.addEventListener('keydown', (e) => this.onKey(e));
    this.svg.addEventListener('blur', () => { this.hoverX = null; this.drawHover(); });
  }

  destroy() { this.ro.disconnect(); }

  // set replaces the series: [{id, label, color, points:[[x,y]...], band:[[x,lo,hi,n?]...], smooth:[[x,y]...]}].
  // A series with a band is a mean ± spread: the tooltip shows both (and n).
  set(series) {
    this.series = series.map((sr) => ({ ...sr, points: (sr.points || []).filter((p) => p && Number.isFinite(p[0]) && Number.isFinite(p[1])) }));
    this.render();
  }

  visible() { return this.series.filter((sr) => !this.hidden.has(sr.id)); }

  // hide hides the series of ids (and shows the others), as the legend does.
  hide(ids) {
    this.hidden = new Set(ids);
    this.render();
  }

  render() {
    const svg = this.svg;
    clear(svg);
    const W = this.width || this.el.clientWidth || 600;
    const H = this.opts.height;
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    svg.setAttribute('height', H);
    this.renderLegend();
    const vis = this.visible();
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity, n = 0;
    for (const sr of vis) {
      for (const p of sr.points) { x0 = Math.min(x0, p[0]); x1 = Math.max(x1, p[0]); y0 = Math.min(y0, p[1]); y1 = Math.max(y1, p[1]); n++; }
      for (const b of sr.band || []) { if (Number.isFinite(b[1])) y0 = Math.min(y0, b[1]); if (Number.isFinite(b[2])) y1 = Math.max(y1, b[2]); }
    }
    const first = this.series[0];
    if (this.lastEl) {
      const lp = first && first.points[first.points.length - 1];
      this.lastEl.textContent = lp && this.series.length === 1 ? 'last ' + fmtNum(lp[1]) + ' @ ' + fmtNum(lp[0]) : '';
    }
    if (n === 0) {
      const t = s('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty-note' });
      t.textContent = this.opts.empty;
      svg.appendChild(t);
      svg.dataset.points = '0';
      this.scale = null;
      return;
    }
    svg.dataset.points = String(n);
    const pw = Math.max(10, W - M.left - M.right), ph = Math.max(10, H - M.top - M.bottom);
    const yt = niceTicks(y0, y1, Math.max(2, Math.round(ph / 45)));
    const xt = niceTicks(x0, x1 > x0 ? x1 : x0 + 1, Math.max(2, Math.round(pw / 90)));
    const xlo = x0, xhi = x1 > x0 ? x1 : x0 + 1;
    const x = (v) => M.left + ((v - xlo) / (xhi - xlo)) * pw;
    const y = (v) => M.top + ph - ((v - yt.lo) / (yt.hi - yt.lo)) * ph;
    this.scale = { x, y, xlo, xhi, pw, ph, W, H };

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
      t.textContent = fmtNum(v, 3);
      axis.appendChild(t);
    }
    const xl = s('text', { x: M.left + pw, y: H - 2, 'text-anchor': 'end', class: 'axis-label' });
    xl.textContent = this.opts.xLabel;
    svg.append(grid, axis, xl);

    const clipId = 'clip' + Math.random().toString(36).slice(2);
    const defs = s('defs');
    const cp = s('clipPath', { id: clipId });
    cp.appendChild(s('rect', { x: M.left, y: M.top - 2, width: pw, height: ph + 4 }));
    defs.appendChild(cp);
    svg.appendChild(defs);
    const plot = s('g', { 'clip-path': `url(#${clipId})` });
    svg.appendChild(plot);

    for (const sr of vis) {
      if (sr.band && sr.band.length > 1) {
        const b = sr.band.filter((p) => Number.isFinite(p[1]) && Number.isFinite(p[2]));
        if (b.length > 1) {
          let d = 'M' + b.map((p) => x(p[0]).toFixed(1) + ',' + y(p[2]).toFixed(1)).join('L');
          d += 'L' + b.slice().reverse().map((p) => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join('L') + 'Z';
          const band = s('path', { d, class: 'band', fill: sr.color });
          band.dataset.series = sr.id;
          plot.appendChild(band);
        }
      }
      // With a smoothed curve, the points are drawn faint behind it.
      if (sr.smooth && sr.smooth.length > 1 && sr.points.length > 1) {
        const r = reduce(sr.points, x, pw);
        plot.appendChild(s('path', { d: 'M' + r.map((p) => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join('L'), class: 'line raw', stroke: sr.color }));
      }
      const pts = reduce(sr.smooth && sr.smooth.length > 1 ? sr.smooth : sr.points, x, pw);
      if (!pts.length) continue; // a series without points (yet) draws nothing
      const d = pts.length === 1
        ? `M${(x(pts[0][0]) - 2).toFixed(1)},${y(pts[0][1]).toFixed(1)}h4`
        : 'M' + pts.map((p) => x(p[0]).toFixed(1) + ',' + y(p[1]).toFixed(1)).join('L');
      const path = s('path', { d, class: 'line', stroke: sr.color });
      path.dataset.points = String(sr.points.length);
      path.dataset.series = sr.id;
      plot.appendChild(path);
    }
    this.hoverG = s('g', { class: 'hover' });
    svg.appendChild(this.hoverG);
    this.drawHover();
  }

  renderLegend() {
    clear(this.legendEl);
    if (!this.opts.legend || this.series.length < 2) { this.legendEl.hidden = true; return; }
    this.legendEl.hidden = false;
    for (const sr of this.series) {
      const on = !this.hidden.has(sr.id);
      const b = h('button', { type: 'button', 'aria-pressed': String(on), title: sr.label },
        h('span', { class: 'swatch', style: { background: sr.color } }), h('span', { class: 'lbl' }, sr.label));
      b.addEventListener('click', () => {
        if (this.hidden.has(sr.id)) this.hidden.delete(sr.id); else this.hidden.add(sr.id);
        this.render();
      });
      this.legendEl.appendChild(b);
    }
  }

  onMove(e) {
    if (!this.scale) return;
    const r = this.svg.getBoundingClientRect();
    const px = ((e.clientX - r.left) / r.width) * this.scale.W;
    const { xlo, xhi, pw } = this.scale;
    this.hoverX = xlo + ((px - M.left) / pw) * (xhi - xlo);
    this.drawHover();
  }

  onKey(e) {
    if (!this.scale) return;
    const { xlo, xhi } = this.scale;
    const step = (xhi - xlo) / 50;
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
      e.preventDefault();
      const cur = this.hoverX ?? (e.key === 'ArrowRight' ? xlo - step : xhi + step);
      this.hoverX = Math.min(xhi, Math.max(xlo, cur + (e.key === 'ArrowRight' ? step : -step)));
      this.drawHover();
    } else if (e.key === 'Home' || e.key === 'End') {
      e.preventDefault();
      this.hoverX = e.key === 'Home' ? xlo : xhi;
      this.drawHover();
    } else if (e.key === 'Escape') {
      this.hoverX = null;
      this.drawHover();
    }
  }

  drawHover() {
    const g = this.hoverG;
    if (!g) return;
    clear(g);
    if (this.hoverX == null || !this.scale) { this.tip.hidden = true; return; }
    const { x, y, xlo, xhi, ph, W } = this.scale;
    const xv = Math.min(xhi, Math.max(xlo, this.hoverX));
    const rows = [];
    let at = null;
    for (const sr of this.visible()) {
      const p = nearest(sr.points, xv);
      if (!p) continue;
      at ??= p[0];
      g.appendChild(s('circle', { cx: x(p[0]), cy: y(p[1]), r: 3.5, fill: sr.color, class: 'pt' }));
      let value = fmtNum(p[1]);
      const b = sr.band && nearest(sr.band, p[0]);
      if (b && b[0] === p[0] && Number.isFinite(b[1]) && Number.isFinite(b[2])) {
        value += ' ± ' + fmtNum((b[2] - b[1]) / 2) + (b[3] != null ? ' (n ' + b[3] + ')' : '');
      }
      rows.push(h('div', { class: 'r' }, h('span', { class: 'swatch', style: { background: sr.color } }), h('span', null, sr.label || ''), h('b', null, value)));
    }
    if (at == null) { this.tip.hidden = true; return; }
    const cx = x(at);
    g.insertBefore(s('line', { x1: cx, x2: cx, y1: M.top, y2: M.top + ph, class: 'cross' }), g.firstChild);
    clear(this.tip);
    this.tip.append(h('div', { class: 't' }, this.opts.xLabel + ' ' + fmtNum(at)), ...rows);
    this.tip.hidden = false;
    const svgBox = this.svg.getBoundingClientRect();
    const scale = svgBox.width / W;
    const left = this.svg.offsetLeft + cx * scale;
    const tw = this.tip.offsetWidth;
    this.tip.style.left = (left + 14 + tw > this.el.clientWidth ? left - 14 - tw : left + 14) + 'px';
    this.tip.style.top = (this.svg.offsetTop + M.top) + 'px';
  }
}

// ema smooths points with an exponential moving average (0: none).
export function ema(points, a) {
  if (!a) return points;
  let m = null;
  return points.map(([px, py]) => {
    m = m == null ? py : a * m + (1 - a) * py;
    return [px, m];
  });
}
