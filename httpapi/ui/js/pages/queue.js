// Queue: the QUEUED runs in the order the scheduler serves them (GET
// /api/queue), each with its position and why it waits, and every user's
// fair-share usage, what they have active and their quota (GET
// /api/users/usage). The viewer's own runs and row are highlighted.
// Polled every 2 s. Admins also set each user's quota here (PUT
// /api/admin/quotas/{user}); that card is drawn on load and after a save
// only, so the poll never wipes what is being typed.

import { api, ApiError } from '../api.js';
import { poller } from '../live.js';
import { h, replace, parseTime, fmtDuration, toast } from '../util.js';

export function mount(root, ctx) {
  const me = ctx && ctx.user ? ctx.user.username : '';
  const ac = new AbortController();
  const errBox = h('div', { class: 'notice error', hidden: true, role: 'alert' });
  const summary = h('div', { class: 'chips', id: 'queue-summary' });
  const qBody = h('tbody', { id: 'queue' });
  const uBody = h('tbody', { id: 'usage' });
  const qCols = ['#', 'Run', 'User', 'GPUs', 'Priority', 'Waiting', 'Why'];
  const uCols = ['User', 'Usage (GPU h)', 'Active GPUs', 'Active runs', 'GPU quota', 'Run quota'];
  // On a phone each row is a card (cards-sm), so the reason a run waits
  // is in sight rather than off to the side.
  const qTable = h('div', { class: 'table-wrap' }, h('table', { class: 'data cards-sm' },
    h('thead', null, h('tr', null, qCols.map((c) => h('th', { scope: 'col' }, c)))),
    qBody));
  const uTable = h('div', { class: 'table-wrap' }, h('table', { class: 'data cards-sm' },
    h('thead', null, h('tr', null, uCols.map((c) => h('th', { scope: 'col' }, c)))),
    uBody));
  // labelled gives each cell of rows its column's name, which a card shows.
  const labelled = (rows, cols) => { for (const tr of rows) [...tr.children].forEach((td, i) => { if (cols[i] && !td.hasAttribute('colspan')) td.dataset.label = cols[i]; }); return rows; };
  const admin = !!(ctx && ctx.user && ctx.user.role === 'ADMIN');
  const quotaBody = h('tbody', { id: 'quotas' });
  const quotaCols = ['User', 'GPUs', 'Runs', ''];
  const quotaCard = admin ? h('section', { class: 'card', id: 'quota-admin' }, h('div', { class: 'card-head' }, h('h2', null, 'Set quotas')),
    h('p', { class: 'muted' }, 'Caps on a user\'s active (dispatched or running) GPUs and runs; empty is no cap, 0 lets none start.'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'data cards-sm' },
      h('thead', null, h('tr', null, quotaCols.map((c) => h('th', { scope: 'col' }, c)))), quotaBody))) : null;
  replace(root, h('div', { class: 'page-head' }, h('h1', null, 'Queue'), summary), errBox,
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Serving order')),
      h('p', { class: 'muted' }, 'Priority first, then the owner\'s recent GPU usage (lighter users first), then age.'), qTable),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Usage and quotas')), uTable), quotaCard);

  function fail(err) {
    if (err && err.name === 'AbortError') return;
    errBox.textContent = err instanceof ApiError ? err.message : String(err);
    errBox.hidden = false;
  }

  async function loadQuotas() {
    if (!admin) return;
    try {
      const q = await api.quotas(ac.signal);
      replace(quotaBody, labelled((q.items || []).map((it) => {
        const val = (n) => (n === null || n === undefined ? '' : String(n));
        const gpus = h('input', { type: 'number', min: '0', class: 'quota-in', placeholder: 'no cap', value: val(it.gpus), dataset: { quotaGpus: it.user }, 'aria-label': 'GPU quota of ' + it.user });
        const runs = h('input', { type: 'number', min: '0', class: 'quota-in', placeholder: 'no cap', value: val(it.runs), dataset: { quotaRuns: it.user }, 'aria-label': 'run quota of ' + it.user });
        const save = h('button', { type: 'button', class: 'btn btn-sm', dataset: { save: it.user } }, 'Save');
        save.addEventListener('click', async () => {
          const num = (el) => (el.value.trim() === '' ? null : Number(el.value));
          try {
            await api.setQuota(it.user, { gpus: num(gpus), runs: num(runs) });
            errBox.hidden = true;
            toast('Quota of ' + it.user + ' saved');
            loadQuotas();
            load();
          } catch (err) { fail(err); }
        });
        return h('tr', { dataset: { quotaUser: it.user } }, h('td', null, it.user), h('td', null, gpus), h('td', null, runs), h('td', null, save));
      }), quotaCols));
    } catch (err) { fail(err); }
  }

  const cap = (n) => (n === null || n === undefined ? '—' : String(n));

  function render(queue, usage) {
    const now = Date.now();
    replace(summary, h('span', { class: 'chip' }, queue.length + ' queued'),
      h('span', { class: 'chip' }, queue.filter((q) => q.user === me).length + ' yours'));
    replace(qBody, queue.length ? labelled(queue.map((q) => h('tr', { class: [q.user === me && 'mine'], dataset: { run: q.id, code: q.pendingCode || 'starting' } },
      h('td', null, q.position ? String(q.position) : '→'),
      h('td', null, h('a', { href: '/runs/' + q.id }, q.name || q.id)),
      h('td', null, q.user),
      h('td', null, String(q.gpus)),
      h('td', null, String(q.priority)),
      // How long it has waited, not when it came: "8s", not "8s ago".
      h('td', { class: 'nowrap', title: q.createdAt || '' }, parseTime(q.createdAt) != null ? fmtDuration(Math.max(0, now - parseTime(q.createdAt))) : '—'),
      h('td', null, q.pendingCode ? h('span', { class: 'badge' }, q.pendingCode) : null, ' ', q.pendingReason || ''))), qCols) :
      h('tr', null, h('td', { colspan: '7', class: 'muted' }, 'Nothing is queued.')));
    replace(uBody, labelled(usage.map((u) => h('tr', { class: [u.user === me && 'mine'], dataset: { user: u.user } },
      h('td', null, u.user),
      h('td', null, (u.usage / 3600).toFixed(2)),
      h('td', null, String(u.runningGpus)),
      h('td', null, String(u.runningRuns)),
      h('td', null, cap(u.quota && u.quota.gpus)),
      h('td', null, cap(u.quota && u.quota.runs)))), uCols));
  }

  async function load() {
    try {
      const [q, u] = await Promise.all([api.queue(ac.signal), api.usage(ac.signal)]);
      errBox.hidden = true;
      render(q.items || [], u.items || []);
    } catch (err) { fail(err); }
  }
  load();
  loadQuotas();
  const stop = poller(load, 2000);
  return () => { stop(); ac.abort(); };
}
