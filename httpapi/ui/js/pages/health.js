// Health: the master's /api/monitor/health (queue, workers by state, log
// pipe, store) as a page: the operators' view, kept off the Runs page.

import { api } from '../api.js';
import { live } from '../live.js';
import { h, replace, badge, fmtBytes, fmtNum } from '../util.js';

const STATES = ['IDLE', 'RUNNING', 'DRAINING', 'PENDING', 'DOWN'];

function gpuCounts(workers) {
  let total = 0, free = 0;
  for (const w of workers || []) {
    if (w.state === 'DOWN') continue;
    // A GPU a foreign process holds, or that fractional runs share, is
    // not free for a run that asks for a whole one.
    for (const g of w.gpus || []) { total++; if (!g.taskId && !(g.foreign || []).length && !(g.shares || []).length) free++; }
  }
  return { total, free };
}

function words(k) {
  return k.replace(/([a-z0-9])([A-Z])/g, '$1 $2').replace(/[_-]+/g, ' ').replace(/^./, (c) => c.toUpperCase());
}

function flat(obj, prefix = '', out = []) {
  for (const [k, v] of Object.entries(obj || {})) {
    const key = prefix ? prefix + '.' + k : k;
    if (v && typeof v === 'object' && !Array.isArray(v)) flat(v, key, out);
    else out.push([key, v]);
  }
  return out;
}

function valueText(k, v) {
  if (typeof v === 'number') return /bytes/i.test(k) ? fmtBytes(v) : fmtNum(v);
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (Array.isArray(v)) return v.join(', ');
  return v == null ? '' : String(v);
}

function stat(label, value, detail, attrs) {
  return h('div', { class: 'stat', ...attrs }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value), detail ? h('div', { class: 'detail' }, detail) : null);
}

function pipeBadge(status) {
  const ok = !status || String(status).toLowerCase() === 'ok';
  return h('span', { class: ['badge', ok ? 'st-UP' : 'st-DOWN'] }, String(status || 'ok').toUpperCase());
}

function queueBar(lp) {
  const used = Math.min(1, (lp.queue_depth || 0) / lp.queue_capacity);
  const fill = h('span');
  fill.style.width = (used * 100).toFixed(1) + '%';
  return h('div', { class: 'bars', style: { marginBottom: '12px' } },
    h('div', { class: 'bar-row' }, h('span', null, 'Queue'), h('div', { class: 'bar' }, fill), h('span', { class: 'num' }, (used * 100).toFixed(0) + '%')));
}

export function mount(root) {
  const ac = new AbortController();
  const body = h('div', { class: 'stack' });
  const updated = h('span', { class: 'faint' });
  replace(root, h('div', { class: 'page-head' }, h('h1', null, 'Health'), h('span', { class: 'spacer' }), updated), body);

  async function refresh() {
    let hl, ws;
    try {
      [hl, ws] = await Promise.all([api.health(ac.signal), api.workers(ac.signal).catch(() => null)]);
    } catch (e) {
      if (e.name === 'AbortError') return;
      replace(body, h('div', { class: 'notice error' }, 'Cannot reach the master: ' + e.message));
      return;
    }
    const w = hl.workers || {};
    const totalW = STATES.reduce((a, s) => a + (w[s] || 0), 0);
    const g = gpuCounts(ws && ws.items);
    const lp = flat(hl.logpipe);
    const bars = h('div', { class: 'bars' }, STATES.map((s) => {
      const fill = h('span');
      fill.style.width = (totalW ? ((w[s] || 0) / totalW) * 100 : 0) + '%';
      return h('div', { class: 'bar-row' }, h('span', null, badge(s)), h('div', { class: 'bar ' + s }, fill), h('span', { class: 'num' }, String(w[s] || 0)));
    }));
    replace(body,
      h('div', { class: 'stat-strip' },
        stat('Status', badge(hl.status || 'DOWN', 'lg'), hl.error || 'store reachable', { id: 'health-status' }),
        stat('Queue', String(hl.queue ? hl.queue.queued : '—'), 'runs waiting', { dataset: { stat: 'queue' } }),
        stat('GPUs free', g.total ? g.free + ' / ' + g.total : '—', g.total ? 'whole GPUs no run or foreign process holds' : 'no GPUs reported', { dataset: { stat: 'gpus' } }),
        stat('Live updates', live.state === 'open' ? 'WebSocket' : 'Polling', live.state === 'open' ? 'this browser is subscribed' : 'REST every 2 s')),
      h('div', { class: 'grid grid-2' },
        h('section', { class: 'card' }, h('h2', null, 'Workers by state'), bars,
          h('p', { class: 'muted' }, h('a', { href: '/workers' }, 'See every worker and its GPUs'))),
        h('section', { class: 'card' }, h('h2', null, 'Master'),
          h('dl', { class: 'kv' },
            h('dt', null, 'Master'), h('dd', { class: 'mono' }, hl.master || '—'),
            h('dt', null, 'Version'), h('dd', { class: 'mono' }, hl.version || '—'),
            h('dt', null, 'Store'), h('dd', null, hl.store || '—'),
            h('dt', null, 'Leases'), h('dd', null, hl.leases || '—')))),
      h('section', { class: 'card', id: 'logpipe-card' },
        h('div', { class: 'card-head' }, h('h2', null, 'Log pipe'), lp.length ? pipeBadge(hl.logpipe.status) : null),
        lp.length && hl.logpipe.queue_capacity ? queueBar(hl.logpipe) : null,
        lp.length
          ? h('dl', { class: 'kvgrid' }, lp.map(([k, v]) => h('div', null, h('dt', null, words(k)), h('dd', { class: ['dir', 'last_error', 'last_error_at'].includes(k) ? 'mono' : 'num' }, valueText(k, v) || '—'))))
          : h('p', { class: 'muted' }, 'This master reports no log pipe statistics.')));
    updated.textContent = 'updated ' + new Date().toLocaleTimeString();
  }
  refresh();
  const t = setInterval(() => { if (document.visibilityState !== 'hidden') refresh(); }, 3000);
  return () => { clearInterval(t); ac.abort(); };
}
