// Compare page, code (issue 27): what differs from the first run's code
// snapshot to each other run's, as `rlsched code-diff` prints it (GET
// /api/tasks/{id}/code-diff/{other}): the changed paths, and each
// modified text file's diff, collapsed.

import { api } from '../api.js';
import { h, replace, fmtBytes } from '../util.js';

const MAX_PAIRS = 3; // the first run against this many others

const CHANGE = { A: 'added', M: 'modified', D: 'deleted' };

// codeCompare keeps box showing the code diffs of runs (tasks in the
// page's order); update(runs) refetches only when the pairs change.
export function codeCompare(box, signal) {
  let sig = null;
  async function update(runs) {
    const withCode = runs.filter((t) => t.code && t.code.tree);
    const base = withCode[0];
    const others = withCode.slice(1, 1 + MAX_PAIRS);
    const s = others.map((t) => base.id + '>' + t.id).join(',');
    if (s === sig) return;
    sig = s;
    if (!base || !others.length) {
      replace(box, h('p', { class: 'muted', id: 'code-compare-none' },
        withCode.length ? 'Only one of these runs has a code snapshot.' : 'None of these runs has a code snapshot (submitted with --no-code or --workdir).'));
      return;
    }
    replace(box, h('p', { class: 'muted' }, 'Loading…'));
    const parts = await Promise.all(others.map(async (t) => {
      try {
        return pair(base, t, await api.codeCompare(base.id, t.id, signal));
      } catch (e) {
        if (e.name === 'AbortError') return null;
        return h('p', { class: 'notice error' }, 'Cannot compare the code of ' + base.id + ' and ' + t.id + ': ' + e.message);
      }
    }));
    if (s === sig) replace(box, parts.filter(Boolean));
  }
  return { update };
}

function pair(a, b, d) {
  const head = h('h3', null, h('code', null, a.name || a.id), ' → ', h('code', null, b.name || b.id));
  if (d.same) return h('div', { class: 'code-pair', 'data-other': b.id }, head, h('p', { class: 'muted' }, 'Both run the same tree ', h('code', null, d.treeA.slice(0, 12)), '.'));
  const rows = d.files.map((f) => {
    const what = CHANGE[f.change] || f.change;
    let body = null;
    if (f.diff) body = h('pre', { class: 'diffview', tabindex: '0', 'aria-label': 'Diff of ' + f.path }, f.diff.replace(/\n$/, '').split('\n').map((l) => h('span', { class: l.startsWith('@@') ? 'hunk' : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : null }, l + '\n')));
    else if (f.binary) body = h('p', { class: 'muted' }, 'Binary or larger than 1 MiB: the files differ.');
    else if (f.diffOmitted) body = h('p', { class: 'muted' }, 'Not shown here (too many changes); rlsched code-diff ' + a.id + ' ' + b.id + ' prints it.');
    else if (f.change === 'M') body = h('p', { class: 'muted' }, 'Mode ' + f.oldMode + ' → ' + f.newMode + '.');
    const sum = h('summary', null, h('span', { class: 'badge change-' + f.change, title: what }, f.change), ' ', h('code', null, f.path), h('span', { class: 'faint' }, ' · ' + what + ', ' + fmtBytes(f.size)));
    return body ? h('details', { class: 'code-change', 'data-path': f.path }, sum, body) : h('div', { class: 'code-change', 'data-path': f.path }, sum);
  });
  const n = d.files.length + d.filesOmitted;
  return h('div', { class: 'code-pair', 'data-other': b.id }, head,
    h('p', { class: 'faint code-stat' }, n + ' file' + (n === 1 ? '' : 's') + ' differ' + (n === 1 ? 's' : '') + (d.filesOmitted ? ' (' + d.filesOmitted + ' not listed)' : '')),
    rows);
}
