// Workers, the fleet view: each worker's state and heartbeat, its GPUs as
// tiles (utilisation bar, memory used/total, the run and user holding it,
// processes rlsched did not start in red, idle runs marked), its CPU slots, its cores and memory used of
// what it offers and how it enforces them (a warning when it does not); for admins, drain (finish its
// runs, take none), undrain, and forget a DOWN worker. Live over
// /topic/workers, else polled every 2 s.

import { api } from '../api.js';
import { live, poller } from '../live.js';
import { h, replace, keyed, badge, fmtAge, parseTime, fmtBytes, toast } from '../util.js';

const ORDER = { RUNNING: 0, IDLE: 1, DRAINING: 2, PENDING: 3, DOWN: 4 };

export function mount(root, ctx) {
  const admin = !!(ctx && ctx.user && ctx.user.role === 'ADMIN');
  const ac = new AbortController();
  const workers = new Map();   // id -> worker
  const tasks = new Map();     // id -> task (or a promise while loading)
  const counts = h('div', { class: 'chips', id: 'worker-counts' });
  const grid = h('div', { class: 'workers', id: 'workers' });
  const errBox = h('div', { class: 'notice error', hidden: true });
  replace(root, h('div', { class: 'page-head' }, h('h1', null, 'Workers'), counts), errBox, grid);

  function taskOf(id) {
    const t = tasks.get(id);
    if (t && !(t instanceof Promise)) return t;
    if (!t) {
      // A task event that came while this was in flight is newer: keep it.
      const p = api.task(id, ac.signal).then((x) => { if (tasks.get(id) === p) { tasks.set(id, x); render(); } })
        .catch(() => { if (tasks.get(id) === p) tasks.delete(id); });
      tasks.set(id, p);
    }
    return null;
  }

  function holder(id) {
    const t = taskOf(id);
    return h('div', { class: 'holder' },
      h('a', { href: '/runs/' + id, title: t ? t.name : id, dataset: { fk: 'gpu-' + id } }, t ? t.name || id : id.slice(0, 12)),
      h('div', { class: 'user' }, t ? t.user + ' · ' + t.status.toLowerCase() : 'loading…'));
  }

  function card(w) {
    const onGPU = new Set((w.gpus || []).filter((g) => g.taskId).map((g) => g.taskId));
    for (const g of w.gpus || []) for (const s of g.shares || []) onGPU.add(s.run);
    const cpuRuns = (w.runningTasks || []).filter((id) => !onGPU.has(id));
    const gpuTiles = (w.gpus || []).map((g) => {
      const foreign = g.foreign || [];
      const shares = g.shares || [];
      return h('div', { class: ['gpu', (g.taskId || shares.length) && 'held', shares.length && 'shared', foreign.length && 'foreign', g.idleSince && 'idle'], dataset: { gpu: String(g.index), task: g.taskId || '' } },
        h('div', { class: 'gpu-h' }, h('span', null, 'GPU ' + g.index), g.memoryMB ? h('span', null, fmtBytes(g.memoryMB * 1048576)) : null),
        h('div', { class: 'gpu-name', title: (g.name || '') + (g.uuid ? ' · ' + g.uuid : '') }, g.name || 'GPU'),
        utilBar(g), memLine(g),
        foreign.length ? h('ul', { class: 'foreign', 'aria-label': 'Processes rlsched did not start' }, foreign.map((p) =>
          h('li', { title: p.command || '' }, 'pid ' + p.pid, p.user ? ' · ' + p.user : '', p.memoryMB != null ? ' · ' + p.memoryMB + ' MiB' : '',
            p.command ? h('div', { class: 'cmd' }, p.command) : null))) : null,
        g.idleSince ? h('div', { class: 'idle-mark', title: 'under IDLE_GPU_UTIL since ' + g.idleSince }, 'idle ' + fmtAge(parseTime(g.idleSince)).replace(/ ago$/, '')) : null,
        // A shared GPU (issue 28): each fractional run with its share.
        shares.length ? h('ul', { class: 'shares', 'aria-label': 'Runs sharing this GPU' }, shares.map((s) =>
          h('li', { dataset: { task: s.run } }, h('span', { class: 'share' }, Math.round(s.fraction * 100) + ' %' + (s.memoryMb ? ' · ' + fmtBytes(s.memoryMb * 1048576) : '')), holder(s.run)))) : null,
        g.taskId ? holder(g.taskId) : shares.length ? null : h('div', { class: 'free' }, foreign.length ? 'not given to runs' : 'free'));
    });
    const slots = [];
    for (let i = 0; i < (w.slots || 0); i++) slots.push(h('span', { class: ['slot', i < cpuRuns.length && 'busy'] }));
    const hb = parseTime(w.lastHeartbeatAt);
    return h('section', { class: ['card', 'worker', w.state === 'DOWN' && 'down'], dataset: { worker: w.id, state: w.state } },
      h('div', { class: 'worker-head' }, h('h2', null, w.id), badge(w.state), admin ? actions(w) : null),
      h('div', { class: 'worker-sub' },
        h('span', null, w.host || ''),
        h('span', { title: w.lastHeartbeatAt || '', dataset: { hb: w.lastHeartbeatAt || '' } }, hb ? 'heartbeat ' + fmtAge(hb) : 'no heartbeat'),
        w.version ? h('span', null, 'v ' + w.version) : null,
        w.master ? h('span', null, 'via ' + w.master) : null),
      w.gpuProblem ? h('p', { class: 'notice error gpu-problem' }, w.gpuProblem) : null,
      w.enforcementWarning ? h('p', { class: 'notice error enforcement-warning' }, 'Limits not enforced: ' + w.enforcementWarning) : null,
      resources(w),
      gpuTiles.length ? h('div', { class: 'gpus' }, gpuTiles) : h('p', { class: 'muted' }, 'No GPUs: CPU runs only.'),
      w.slots ? h('div', { class: 'slots', 'aria-label': cpuRuns.length + ' of ' + w.slots + ' CPU slots busy' }, h('span', null, 'CPU slots'), slots, h('span', null, cpuRuns.length + ' / ' + w.slots + ' busy')) : null,
      cpuRuns.length ? h('ul', { class: 'worker-runs' }, cpuRuns.map((id) => {
        const t = taskOf(id);
        return h('li', null, h('a', { href: '/runs/' + id, dataset: { fk: 'cpu-' + id } }, t ? t.name || id : id.slice(0, 12)), t ? ' · ' + t.user : '');
      })) : null);
  }

  // resources is a worker's cores and memory, used of what it offers ("—"
  // when it offers no count: no limit is placed on it), and its enforcement.
  function resources(w) {
    const cores = (n) => String(Math.round(n * 1000) / 1000);
    const cpus = w.cpus ? cores(w.cpusUsed || 0) + ' / ' + cores(w.cpus) + ' cores' : 'cores —';
    const mem = w.memoryMb ? fmtBytes((w.memoryMbUsed || 0) * 1048576) + ' / ' + fmtBytes(w.memoryMb * 1048576) : 'memory —';
    return h('div', { class: 'worker-sub worker-resources', dataset: { cpus: String(w.cpus || 0), memory: String(w.memoryMb || 0) } },
      h('span', { class: 'cpus' }, cpus), h('span', { class: 'memory' }, mem),
      h('span', { class: 'enforcement', title: 'how runs are held to their limits' }, 'enforcement: ' + (w.enforcement || 'none')));
  }

  // utilBar is a GPU's utilisation at the worker's last sample.
  function utilBar(g) {
    if (g.utilization == null) return h('div', { class: 'util unknown', title: 'no utilisation reported' }, h('span', null, 'util —'));
    const pct = Math.max(0, Math.min(100, g.utilization));
    return h('div', { class: 'util', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(pct), 'aria-label': 'GPU ' + g.index + ' utilisation' },
      h('div', { class: 'bar' }, h('div', { class: 'fill', style: { width: pct + '%' } })), h('span', null, pct + ' %'));
  }

  function memLine(g) {
    if (g.memoryUsedMB == null) return null;
    return h('div', { class: 'mem' }, fmtBytes(g.memoryUsedMB * 1048576) + (g.memoryMB ? ' / ' + fmtBytes(g.memoryMB * 1048576) : ''));
  }

  // actions are an admin's buttons for w: drain or undrain a connected
  // worker, forget a DOWN one.
  function actions(w) {
    const act = async (what, call) => {
      errBox.hidden = true;
      try {
        const r = await call();
        if (r && r.id) workers.set(r.id, r);
        else workers.delete(w.id);
        toast(what);
        render();
      } catch (e) {
        errBox.textContent = e.message;
        errBox.hidden = false;
      }
    };
    const btn = (label, fk, f, danger) => h('button', { type: 'button', class: ['btn', 'btn-sm', danger ? 'btn-danger' : 'btn-ghost'], dataset: { fk: fk + '-' + w.id, action: fk }, onclick: f }, label);
    if (w.state === 'DOWN') return h('div', { class: 'btn-row worker-actions' }, btn('Forget', 'forget', () => act('Forgot ' + w.id, () => api.forgetWorker(w.id)), true));
    if (w.state === 'PENDING') return null;
    const draining = w.state === 'DRAINING';
    return h('div', { class: 'btn-row worker-actions' }, draining
      ? btn('Undrain', 'undrain', () => act(w.id + ' takes runs again', () => api.drainWorker(w.id, false)))
      : btn('Drain', 'drain', () => act(w.id + ' drains: it finishes its runs and takes no new ones', () => api.drainWorker(w.id, true))));
  }

  function render() {
    const ws = [...workers.values()].sort((a, b) => (ORDER[a.state] ?? 9) - (ORDER[b.state] ?? 9) || a.id.localeCompare(b.id));
    const c = {};
    for (const w of ws) c[w.state] = (c[w.state] || 0) + 1;
    replace(counts, Object.entries(c).map(([s, n]) => h('span', { class: 'chip' }, badge(s), h('span', { class: 'count' }, String(n)))));
    if (!ws.length) {
      grid._keyed = null;
      replace(grid, h('div', { class: 'empty' }, h('strong', null, 'No workers'), 'Start one with ', h('code', null, 'rlsched worker --master HOST:9000'), ' or ', h('code', null, 'rlsched up'), '.'));
      return;
    }
    if (!grid._keyed) replace(grid);
    keyed(grid, ws, (w) => w.id, sig, card);
  }

  // sig is what a worker's card shows, but its heartbeat time (ticked apart).
  function sig(w) {
    const held = (w.runningTasks || []).map((id) => {
      const t = tasks.get(id);
      return t && !(t instanceof Promise) ? [id, t.name, t.user, t.status] : [id];
    });
    return JSON.stringify([{ ...w, lastHeartbeatAt: undefined }, held]);
  }

  function tickHeartbeats() {
    for (const card of grid.querySelectorAll('[data-worker]')) {
      const w = workers.get(card.dataset.worker);
      const el = card.querySelector('[data-hb]');
      if (!w || !el) continue;
      const hb = parseTime(w.lastHeartbeatAt);
      el.dataset.hb = w.lastHeartbeatAt || '';
      el.title = w.lastHeartbeatAt || '';
      el.textContent = hb ? 'heartbeat ' + fmtAge(hb) : 'no heartbeat';
    }
  }

  async function load() {
    try {
      const r = await api.workers(ac.signal);
      workers.clear();
      for (const w of r.items || []) workers.set(w.id, w);
      // Forget runs no GPU or slot holds any more (their status changes).
      const held = new Set();
      for (const w of workers.values()) for (const id of w.runningTasks || []) held.add(id);
      for (const id of [...tasks.keys()]) if (!held.has(id)) tasks.delete(id);
      errBox.hidden = true;
      render();
      tickHeartbeats();
    } catch (e) {
      if (e.name === 'AbortError') return;
      errBox.textContent = 'Cannot load workers: ' + e.message;
      errBox.hidden = false;
    }
  }

  function onFrame(m) {
    if (m.type === 'subscribed' || m.type === 'lagged') { load(); return; }
    if (m.type === 'worker' && m.data && m.data.id) {
      workers.set(m.data.id, m.data);
      render();
      tickHeartbeats();
    }
  }

  // A held run's status (dispatched → running) changes without its worker's
  // view changing: follow the runs this page shows.
  function onTask(m) {
    if (m.type !== 'task' || !m.data || !tasks.has(m.data.id)) return;
    tasks.set(m.data.id, m.data);
    render();
  }

  const unsub = live.subscribe('/topic/workers', onFrame);
  const unsubTasks = live.subscribe('/topic/tasks', onTask);
  const stopPoll = poller(load, 2000, '/topic/workers');
  // Utilisation and memory change at every sample without an event (the
  // master publishes a worker's view when foreign processes, problems or
  // idle runs change): read them again every GPU_SAMPLE_SECONDS' default.
  const gpuPoll = setInterval(() => { if ([...workers.values()].some((w) => (w.gpus || []).length)) load(); }, 10000);
  const tick = setInterval(tickHeartbeats, 1000);
  load();
  return () => { ac.abort(); unsub(); unsubTasks(); stopPoll(); clearInterval(tick); clearInterval(gpuPoll); };
}
