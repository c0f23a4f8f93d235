// A virtualised log viewer: the text is kept in chunks (one string plus an
// index of line starts each), and only the rows in view are in the DOM, so a
// million lines cost a few dozen elements. It follows the end while the
// reader is at the bottom and stops when they scroll up.

import { h, clear } from './util.js';

const LINE_H = 18;          // px, matches .logview .ln in style.css
const MAX_SCROLL = 8e6;     // px: browsers cap element heights (~16–33M)
const MAX_CHARS = 96e6;     // characters kept before the oldest chunks go
const MERGE_BELOW = 256e3;  // small appends merge into the last chunk
const SHOW_CHARS = 4000;    // a longer line is shown cut (the download has it whole)
const OVERSCAN = 20;
export const WRAP_MAX = 5000; // lines a wrapped view draws whole (wrapped rows have no fixed height)

class Chunk {
  constructor(text) {
    this.text = text; // complete lines joined by \n, without the final \n
    const starts = [0];
    let i = -1;
    while ((i = text.indexOf('\n', i + 1)) !== -1) starts.push(i + 1);
    this.starts = Uint32Array.from(starts);
    this.count = starts.length;
  }
  line(j) {
    const end = j + 1 < this.count ? this.starts[j + 1] - 1 : this.text.length;
    return this.text.slice(this.starts[j], end);
  }
  // shown are the indexes of the lines that are not metric lines, made
  // once (a chunk never changes: an append makes a new one).
  shown() {
    if (!this._shown) {
      const out = [];
      for (let j = 0; j < this.count; j++) if (!isMetric(this.line(j))) out.push(j);
      this._shown = Uint32Array.from(out);
    }
    return this._shown;
  }
}

const METRIC = 'RLSCHED_METRIC ';
const isMetric = (t) => t.includes(METRIC);

export class LogView {
  constructor() {
    this.chunks = [];
    this.firstLine = [];   // line number (0-based, absolute) of each chunk's first line
    this.total = 0;        // complete lines kept
    this.dropped = 0;      // lines dropped from the front
    this.chars = 0;
    this.partial = '';     // the unfinished last line
    this.follow = true;
    this.lastSetTop = -1;  // scrollTop this code set last (its scroll event is not the reader's)
    this.highlight = -1;
    this.hideMetrics = false; // RLSCHED_METRIC lines left out of the view (not of the log)
    this.wrap = false;        // long lines wrapped: every row drawn, up to WRAP_MAX
    this.onWrapChange = null;
    this.frame = 0;
    this.onFollowChange = null;

    this.spacer = h('div', { class: 'spacer' });
    this.rows = h('div', { class: 'rows' });
    this.el = h('div', { class: 'logview', tabindex: '0', role: 'log', 'aria-label': 'Run log', 'aria-live': 'off' }, this.spacer, this.rows);
    this.el.addEventListener('scroll', () => this.onScroll(), { passive: true });
    this.el.addEventListener('wheel', (e) => { if (e.deltaY < 0) this.setFollow(false); }, { passive: true });
    this.el.addEventListener('keydown', (e) => this.onKey(e));
    this.ro = new ResizeObserver(() => this.schedule());
    this.ro.observe(this.el);
  }

  destroy() {
    this.ro.disconnect();
    cancelAnimationFrame(this.frame);
  }

  get lineCount() { return this.dropped + this.total + (this.partial ? 1 : 0); }

  clear() {
    this.chunks = []; this.firstLine = []; this.total = 0; this.dropped = 0; this.chars = 0; this.partial = '';
    // Wrapped rows are drawn again only when their signature changes, and
    // another log of as many lines (a group's other rank) has the same one.
    this.drawn = null;
    this.schedule();
  }

  // append adds text (any slice of the log: it may end inside a line).
  append(text) {
    if (!text) return;
    let s = this.partial + text;
    const nl = s.lastIndexOf('\n');
    if (nl < 0) {
      this.partial = s;
      this.schedule();
      return;
    }
    this.partial = s.slice(nl + 1);
    s = s.slice(0, nl);
    const last = this.chunks[this.chunks.length - 1];
    if (last && last.text.length + s.length < MERGE_BELOW) {
      const merged = new Chunk(last.text + '\n' + s);
      this.total += merged.count - last.count;
      this.chars += s.length + 1;
      this.chunks[this.chunks.length - 1] = merged;
    } else {
      const c = new Chunk(s);
      this.firstLine.push(this.dropped + this.total);
      this.chunks.push(c);
      this.total += c.count;
      this.chars += s.length;
    }
    while (this.chars > MAX_CHARS && this.chunks.length > 1) {
      const c = this.chunks.shift();
      this.firstLine.shift();
      this.chars -= c.text.length;
      this.total -= c.count;
      this.dropped += c.count;
    }
    this.schedule();
  }

  // line returns the text of absolute line n (0-based), or null if not kept.
  line(n) {
    if (n < this.dropped) return null;
    const k = n - this.dropped;
    if (k >= this.total) return k === this.total && this.partial ? this.partial : null;
    let lo = 0, hi = this.chunks.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.firstLine[mid] <= n) lo = mid; else hi = mid - 1;
    }
    return this.chunks[lo].line(n - this.firstLine[lo]);
  }

  // find returns the first absolute line number at or after from whose text
  // contains needle, or -1 (searches what is kept).
  find(needle, from = 0) {
    for (let n = Math.max(from, this.dropped); n < this.lineCount; n++) {
      const t = this.line(n);
      if (t !== null && t.includes(needle)) return n;
    }
    return -1;
  }

  // setHideMetrics leaves the RLSCHED_METRIC lines out of the view, or
  // shows them again; find and the line numbers stay the log's.
  setHideMetrics(on) {
    if (this.hideMetrics === on) return;
    this.hideMetrics = on;
    this.schedule();
  }

  // setWrap wraps long lines (a phone's narrow screen), or stops. A wrapped
  // row has no fixed height, so the view draws every row instead of those
  // in sight: it is offered up to WRAP_MAX rows, and a longer log unwraps.
  setWrap(on) {
    on = on && this.kept() <= WRAP_MAX;
    if (this.wrap === on) return;
    this.wrap = on;
    this.el.classList.toggle('wrap', on);
    this.drawn = '';
    if (this.onWrapChange) this.onWrapChange(on);
    this.schedule();
  }

  // absOf is the absolute line number of row k of the view.
  absOf(k) {
    if (!this.hideMetrics) return this.dropped + k;
    for (let c = 0; c < this.chunks.length; c++) {
      const sh = this.chunks[c].shown();
      if (k < sh.length) return this.firstLine[c] + sh[k];
      k -= sh.length;
    }
    return this.dropped + this.total; // the partial line
  }

  // rowOf is the row of the view that shows absolute line n, or the next
  // one shown when n is hidden.
  rowOf(n) {
    const k = Math.max(0, n - this.dropped);
    if (!this.hideMetrics) return k;
    let row = 0;
    for (let c = 0; c < this.chunks.length; c++) {
      const sh = this.chunks[c].shown();
      const j = n - this.firstLine[c];
      if (j < this.chunks[c].count) {
        let lo = 0, hi = sh.length;
        while (lo < hi) { const mid = (lo + hi) >> 1; if (sh[mid] < j) lo = mid + 1; else hi = mid; }
        return row + lo;
      }
      row += sh.length;
    }
    return row;
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.render(); });
  }

  // kept is the number of rows of the view: the lines kept, less the
  // metric lines while they are hidden.
  kept() {
    const partial = this.partial && !(this.hideMetrics && isMetric(this.partial)) ? 1 : 0;
    if (!this.hideMetrics) return this.total + partial;
    let n = 0;
    for (const c of this.chunks) n += c.shown().length;
    return n + partial;
  }

  geometry() {
    const kept = this.kept();
    const full = kept * LINE_H;
    const height = Math.min(full, MAX_SCROLL);
    return { kept, full, height, scaled: full > MAX_SCROLL };
  }

  render() {
    if (this.wrap && this.kept() > WRAP_MAX) this.setWrap(false);
    if (this.wrap) { this.renderAll(); return; }
    const { kept, height, scaled } = this.geometry();
    this.spacer.style.height = height + 'px';
    const view = this.el.clientHeight || 400;
    const visible = Math.ceil(view / LINE_H) + 1;
    if (this.follow) this.setTop(this.el.scrollHeight);
    const top = this.el.scrollTop;
    let firstKept, offsetPx;
    if (!scaled) {
      firstKept = Math.floor(top / LINE_H);
      offsetPx = firstKept * LINE_H;
    } else {
      const maxTop = Math.max(1, height - view);
      const frac = Math.min(1, top / maxTop);
      firstKept = Math.round(frac * Math.max(0, kept - visible + 1));
      offsetPx = top;
    }
    const start = Math.max(0, firstKept - (scaled ? 0 : OVERSCAN));
    const end = Math.min(kept, firstKept + visible + (scaled ? 0 : OVERSCAN));
    this.rows.style.transform = `translateY(${scaled ? offsetPx : start * LINE_H}px)`;
    const frag = document.createDocumentFragment();
    this.drawRows(frag, start, end, kept);
    clear(this.rows).appendChild(frag);
    if (this.follow) this.setTop(this.el.scrollHeight);
  }

  // renderAll draws every row, wrapped, in the document's flow.
  renderAll() {
    const kept = this.kept();
    // Scrolls render too: draw again only when the rows changed.
    const sig = [this.dropped, this.total, this.partial.length, this.hideMetrics, this.highlight].join(' ');
    if (sig === this.drawn) { if (this.follow) this.setTop(this.el.scrollHeight); return; }
    this.drawn = sig;
    this.spacer.style.height = '0px';
    this.rows.style.transform = 'none';
    const frag = document.createDocumentFragment();
    this.drawRows(frag, 0, kept, kept);
    clear(this.rows).appendChild(frag);
    if (this.follow) this.setTop(this.el.scrollHeight);
  }

  // drawRows appends rows start..end of the view to frag.
  drawRows(frag, start, end, kept) {
    const digits = String(this.dropped + kept).length;
    const gutter = Math.max(5, digits) * 8 + 14;
    for (let k = start; k < end; k++) {
      const n = this.absOf(k);
      let t = this.line(n) ?? '';
      const isPartial = n === this.dropped + this.total && this.partial !== '';
      let cls = 'ln';
      if (t.startsWith('=== rlsched attempt') || t.startsWith('TRACE_ID:')) cls += ' mark';
      else if (isMetric(t)) cls += ' dim';
      else if (/\b(error|exception|traceback|fatal)\b/i.test(t)) cls += ' err';
      if (isPartial) cls += ' partial';
      if (n === this.highlight) cls += ' hl';
      if (t.length > SHOW_CHARS) t = t.slice(0, SHOW_CHARS) + ` … (${t.length - SHOW_CHARS} more characters)`;
      const no = h('span', { class: 'no' }, String(n + 1));
      no.style.width = gutter + 'px';
      frag.appendChild(h('div', { class: cls, dataset: { line: String(n + 1) } }, no, h('span', { class: 'tx' }, t)));
    }
  }

  setTop(v) {
    this.el.scrollTop = v;
    this.lastSetTop = this.el.scrollTop;
  }

  onScroll() {
    if (this.el.scrollTop === this.lastSetTop) {
      this.schedule(); // our own scroll
      return;
    }
    this.lastSetTop = -1;
    const atEnd = this.el.scrollTop + this.el.clientHeight >= this.el.scrollHeight - LINE_H;
    this.setFollow(atEnd);
    this.schedule();
  }

  setFollow(on) {
    if (this.follow === on) return;
    this.follow = on;
    if (this.onFollowChange) this.onFollowChange(on);
    if (on) this.schedule();
  }

  // scrollToLine shows absolute line n (0-based) and highlights it.
  scrollToLine(n) {
    const { kept, height, scaled } = this.geometry();
    const k = this.rowOf(n);
    this.highlight = n;
    this.setFollow(false);
    if (this.wrap) { // rows have their own heights: ask the row drawn for n
      this.render();
      const row = this.rows.querySelector(`[data-line="${n + 1}"]`);
      if (row) this.setTop(Math.max(0, row.offsetTop - this.el.clientHeight / 3));
      return;
    }
    const view = this.el.clientHeight || 400;
    if (!scaled) this.setTop(Math.max(0, k * LINE_H - view / 3));
    else this.setTop((k / Math.max(1, kept)) * Math.max(1, height - view));
    this.schedule();
  }

  onKey(e) {
    const page = Math.max(1, this.el.clientHeight - LINE_H);
    let d = 0;
    switch (e.key) {
      case 'ArrowDown': d = LINE_H; break;
      case 'ArrowUp': d = -LINE_H; break;
      case 'PageDown': case ' ': d = page; break;
      case 'PageUp': d = -page; break;
      case 'Home': this.setFollow(false); this.el.scrollTop = 0; e.preventDefault(); return;
      case 'End': this.setFollow(true); e.preventDefault(); return;
      default: return;
    }
    e.preventDefault();
    if (d < 0) this.setFollow(false);
    this.el.scrollTop += d;
  }
}
