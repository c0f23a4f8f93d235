// Sweeps: every sweep newest first, with its members' progress (done,
// running, queued, failed), refreshed while members change.

import { api } from '../api.js';
import { live, poller } from '../live.js';
import { h, replace, keyed, fmtAge, parseTime, debounce } from '../util.js';

// progressOf sorts a sweep's counts (of its members' latest runs) in four,
// and a fifth when stopped (the members its early stopping stopped, among
// the CANCELLED ones) is given: a member stopped early did not fail.
export function progressOf(counts = {}, stopped = 0) {
  const n = (...sts) => sts.reduce((a, s) => a + (counts[s] || 0), 0);
  return {
    done: n('SUCCEEDED'),
    running: n('DISPATCHED', 'RUNNING'),
    queued: n('QUEUED', 'LOST'),
    failed: n('FAILED', 'CANCELLED', 'TIMEOUT') - stopped,
    stopped,
  };
}

// progressBar is a sweep's members as one stacked bar and a line of text.
export function progressBar(counts, members, stopped = 0) {
  const p = progressOf(counts, stopped);
  const total = Math.max(1, members || p.done + p.running + p.queued + p.failed + p.stopped);
  const bar = h('div', { class: 'sweep-bar', role: 'img', 'aria-label': `${p.done} done, ${p.running} running, ${p.queued} queued, ${p.failed} failed` + (p.stopped ? `, ${p.stopped} stopped early` : '') });
  for (const [k, v] of Object.entries(p)) {
    if (!v) continue;
    const seg = h('span', { class: 'seg-' + k, title: v + ' ' + k });
    seg.style.width = (v / total) * 100 + '%';
    bar.appendChild(seg);
  }
  const text = h('div', { class: 'sweep-progress-text' },
    h('span', null, p.done + '/' + (members || 0) + ' done'),
    p.running ? h('span', { class: 'st-text-running' }, p.running + ' running') : null,
    p.queued ? h('span', null, p.queued + ' queued') : null,
    p.failed ? h('span', { class: 'st-text-failed' }, p.failed + ' failed') : null,
    p.stopped ? h('span', null, p.stopped + ' stopped early') : null);
  return h('div', { class: 'sweep-progress', dataset: { done: p.done, running: p.running, queued: p.queued, failed: p.failed, stopped: p.stopped } }, bar, text);
}

export function mount(root, ctx) {
  const ac = new AbortController();
  let mine = ctx.query.get('user') === ctx.user.username;
  let items = [];
  let cursor = '';
  const tbody = h('tbody');
  const empty = h('div', { class: 'empty', hidden: true });
  const errBox = h('div', { class: 'notice error', role: 'alert', hidden: true });
  const more = h('button', { type: 'button', class: 'btn btn-sm', hidden: true }, 'Load more');
  const mineBtn = h('button', { type: 'button', class: 'chip', 'aria-pressed': String(mine), id: 'sweeps-mine' }, 'Mine');
  mineBtn.addEventListener('click', () => {
    mine = !mine;
    mineBtn.setAttribute('aria-pressed', String(mine));
    history.replaceState(null, '', '/sweeps' + (mine ? '?user=' + encodeURIComponent(ctx.user.username) : ''));
    load(false);
  });
  more.addEventListener('click', () => load(true));

  replace(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Sweeps'), h('span', { class: 'spacer' })),
    h('div', { class: 'filters' }, mineBtn,
      h('span', { class: 'faint' }, 'A sweep runs a grid or random search over params, each cell with several seeds: ',
        h('code', null, 'rlsched sweep --grid lr=3e-4,1e-3 --seeds 5 -- python3 train.py'))),
    errBox,
    h('div', { class: 'table-wrap' },
      h('table', { class: 'data', id: 'sweeps-table' },
        h('thead', null, h('tr', null, h('th', null, 'Name'), h('th', { class: 'hide-sm' }, 'User'), h('th', { class: 'hide-sm' }, 'Project'),
          h('th', { class: 'num' }, 'Members'), h('th', null, 'Progress'), h('th', { class: 'hide-sm' }, 'Created'))),
        tbody),
      empty),
    h('div', { class: 'table-foot' }, more));

  function row(sw) {
    return h('tr', { dataset: { id: sw.id } },
      h('td', { class: 'name' }, h('a', { href: '/sweeps/' + sw.id }, sw.name || sw.id), h('div', { class: 'sub mono' }, sw.id)),
      h('td', { class: 'hide-sm' }, sw.user),
      h('td', { class: 'hide-sm' }, sw.project || h('span', { class: 'faint' }, '—')),
      h('td', { class: 'num' }, String(sw.members), sw.maxParallel ? h('div', { class: 'sub' }, 'at most ' + sw.maxParallel + ' at once') : null),
      h('td', { class: 'progress-cell' }, progressBar(sw.counts, sw.members)),
      h('td', { class: 'hide-sm nowrap', title: sw.createdAt }, fmtAge(parseTime(sw.createdAt))));
  }

  function render() {
    keyed(tbody, items, (s) => s.id, (s) => JSON.stringify(s), row);
    empty.hidden = items.length > 0;
    replace(empty, h('strong', null, mine ? 'You have no sweeps yet' : 'No sweeps yet'),
      h('span', null, 'Submit one with the CLI (rlsched sweep), the Python client (Client.sweep) or POST /api/sweeps.'));
    more.hidden = !cursor;
  }

  async function load(append) {
    try {
      const q = { user: mine ? ctx.user.username : '', limit: append ? 50 : Math.min(500, Math.max(50, items.length)), cursor: append ? cursor : '' };
      const r = await api.sweeps(q, ac.signal);
      items = append ? items.concat(r.items) : r.items;
      cursor = r.nextCursor || '';
      errBox.hidden = true;
    } catch (e) {
      if (e.name === 'AbortError') return;
      errBox.textContent = 'Cannot load sweeps: ' + e.message;
      errBox.hidden = false;
    }
    render();
  }

  // A member's change moves its sweep's counts: reload soon after.
  const soon = debounce(() => load(false), 700);
  const unsub = live.subscribe('/topic/tasks', (m) => {
    if (m.type === 'subscribed' || m.type === 'lagged' || (m.type === 'task' && m.data && m.data.sweepId)) soon();
  });
  const stopPoll = poller(() => load(false), 3000, '/topic/tasks');
  load(false);
  return () => { ac.abort(); unsub(); stopPoll(); soon.cancel(); };
}
