// Exports of what a page shows: a chart as SVG or PNG (its computed styles
// written into the copy as presentation attributes, so the file looks as
// the page does without the stylesheet; a style attribute would be refused
// by the dashboard's Content-Security-Policy), and tables as CSV.

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
