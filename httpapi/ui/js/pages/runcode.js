// Run page, code snapshot (issue 27): the files of the tree the run runs,
// collapsed; opening it lists them, and a click on a file shows it.

import { api } from '../api.js';
import { h, replace, fmtBytes } from '../util.js';

const SHOW_MAX = 256 << 10; // files up to this size are shown in the page

// snapshotDetails is the snapshot of run id (its Task's code c), or null
// when it has none.
export function snapshotDetails(id, c, signal) {
  if (!c.tree) return null;
  const body = h('div', { class: 'muted' }, 'Loading…');
  const view = h('div', { id: 'code-file' });
  const d = h('details', { class: 'more', id: 'code-tree' },
    h('summary', null, 'Snapshot ', h('code', null, c.tree.slice(0, 12)), c.subdir ? ' · runs in ' + c.subdir + '/' : ''), body, view);
  let loaded = false;
  d.addEventListener('toggle', async () => {
    if (!d.open || loaded) return;
    loaded = true;
    try {
      const l = await api.code(id, signal);
      const rows = (l.files || []).map((f) => {
        const name = f.mode === '120000' ? f.path + ' → ' + f.target : f.path;
        const link = h('a', { href: '#code-file', 'data-path': f.path }, name);
        link.addEventListener('click', (ev) => { ev.preventDefault(); show(f); });
        return h('tr', null, h('td', null, link), h('td', { class: 'num' }, fmtBytes(f.size)), h('td', null, h('code', null, f.mode)));
      });
      replace(body, h('p', { class: 'muted' }, (l.files || []).length + ' files, ' + fmtBytes(l.size || 0)),
        h('table', { class: 'table', id: 'code-files' }, h('tbody', null, rows)));
    } catch (e) {
      loaded = false;
      if (e.name !== 'AbortError') replace(body, h('p', { class: 'notice error' }, 'Cannot list the snapshot: ' + e.message));
    }
  });
  async function show(f) {
    const url = api.codeFileURL(id, f.path);
    const raw = h('a', { href: url, download: f.path.split('/').pop(), class: 'btn btn-ghost btn-sm' }, 'Download');
    if (f.size > SHOW_MAX) {
      replace(view, h('p', { class: 'muted' }, f.path + ' is ' + fmtBytes(f.size) + '; too large to show here. '), raw);
      return;
    }
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(await api.bytes(url, signal));
      replace(view, h('h3', null, f.path), h('pre', { class: 'code' }, text), raw);
    } catch (e) {
      if (e.name === 'AbortError') return;
      replace(view, h('p', { class: 'muted' }, e instanceof TypeError ? f.path + ' is not text. ' : 'Cannot load ' + f.path + ': ' + e.message), raw);
    }
  }
  return d;
}
