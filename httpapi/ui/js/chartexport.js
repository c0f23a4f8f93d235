// Exports of what a page shows: a chart as SVG or PNG (its computed styles
// written into the copy as presentation attributes, so the file looks as
// the page does without the stylesheet; a style attribute would be refused
// by the dashboard's Content-Security-Policy), and tables as CSV or, drawn
// as a grid of cells, as SVG or PNG.

const STYLE_PROPS = ['fill', 'stroke', 'stroke-width', 'stroke-dasharray', 'opacity', 'font-size', 'font-family', 'font-weight'];

// svgText is svg as a standalone SVG document of width × height.
export function svgText(svg) {
  const copy = svg.cloneNode(true);
  const src = svg.querySelectorAll('*');
  const dst = copy.querySelectorAll('*');
  src.forEach((el, i) => {
    const cs = getComputedStyle(el);
    for (const p of STYLE_PROPS) {
      const v = cs.getPropertyValue(p);
      if (v) dst[i].setAttribute(p, v);
    }
  });
  copy.querySelectorAll('.hover').forEach((g) => g.remove());
  copy.setAttribute('xmlns', 'http://www.w3.org/2000/svg');
  const vb = (svg.getAttribute('viewBox') || '0 0 600 220').split(' ').map(Number);
  copy.setAttribute('width', vb[2]);
  copy.setAttribute('height', vb[3]);
  const bg = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
  bg.setAttribute('width', '100%');
  bg.setAttribute('height', '100%');
  bg.setAttribute('fill', getComputedStyle(document.body).getPropertyValue('--surface').trim() || '#fff');
  copy.insertBefore(bg, copy.firstChild);
  return new XMLSerializer().serializeToString(copy);
}

export function download(name, blob) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

export function downloadSVG(svg, name) {
  download(name + '.svg', new Blob([svgText(svg)], { type: 'image/svg+xml' }));
}

// downloadPNG draws the SVG on a canvas at twice its size.
export function downloadPNG(svg, name) {
  const text = svgText(svg);
  const vb = (svg.getAttribute('viewBox') || '0 0 600 220').split(' ').map(Number);
  const img = new Image();
  img.onload = () => {
    const c = document.createElement('canvas');
    c.width = vb[2] * 2; c.height = vb[3] * 2;
    const g = c.getContext('2d');
    g.scale(2, 2);
    g.drawImage(img, 0, 0);
    c.toBlob((b) => { if (b) download(name + '.png', b); }, 'image/png');
  };
  img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(text);
}

// tableSvg draws rows (the first the header) as an SVG grid of text cells,
// each column as wide as its longest text; fill(r, c) is a cell's
// background, or null. Its attributes are its whole style.
export function tableSvg(rows, fill = () => null) {
  const NS = 'http://www.w3.org/2000/svg', RH = 26, PAD = 10, CW = 7.2;
  const widths = rows[0].map((_, c) => PAD * 2 + CW * Math.max(...rows.map((r) => String(r[c] ?? '').length)));
  const W = widths.reduce((a, b) => a + b, 0), H = RH * rows.length;
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', `0 0 ${Math.ceil(W)} ${H}`);
  const el = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text != null) e.textContent = text;
    svg.appendChild(e);
  };
  rows.forEach((r, i) => {
    let x = 0;
    r.forEach((v, c) => {
      const bg = i ? fill(i - 1, c) : '#f1f3f8';
      if (bg) el('rect', { x, y: i * RH, width: widths[c], height: RH, fill: bg });
      el('text', { x: x + PAD, y: i * RH + 17, 'font-family': 'sans-serif', 'font-size': 12, 'font-weight': i ? 400 : 600, fill: '#1d2333' }, String(v ?? ''));
      x += widths[c];
    });
    el('line', { x1: 0, x2: W, y1: (i + 1) * RH, y2: (i + 1) * RH, stroke: '#dde1ea', 'stroke-width': 1 });
  });
  return svg;
}

function csvCell(v) {
  const s = v == null ? '' : String(v);
  return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
}

// csvText is rows (arrays of cells) as CSV.
export function csvText(rows) {
  return rows.map((r) => r.map(csvCell).join(',')).join('\n') + '\n';
}

export function downloadCSV(rows, name) {
  download(name + '.csv', new Blob([csvText(rows)], { type: 'text/csv' }));
}
