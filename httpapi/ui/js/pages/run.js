// Run page: live status, the log tail, metric charts (the log's
// RLSCHED_METRIC lines as they come, and the master's other series, such as
// TensorBoard scalars), everything recorded about the run, its code and diff,
// its attempts and output files, and cancel / rerun.

import { api } from '../api.js';
import { live, poller } from '../live.js';
import { LogView, WRAP_MAX } from '../logview.js';
import { LogStream, downloadLog } from '../logstream.js';
import { TerminalView } from '../terminalview.js';
import { LineChart, smoothingControl } from '../chart.js';
import { recordBox } from './runrecord.js';
import { snapshotDetails } from './runcode.js';
import { loadSelection, saveSelection } from './runs.js';
import {
  h, replace, clear, badge, fmtDuration, fmtTime, fmtNum, fmtBytes, parseTime, runDuration, placement,
  shellQuote, paramsOf, paramText, mayCancel, copyButton, toast, sessionURL, TERMINAL, PALETTE, RESUME_METRIC,
} from '../util.js';

const METRIC = 'RLSCHED_METRIC ';
const MAX_CHARTS = 8;
const PREVIEW_MAX = 64 << 10;    // artifacts up to this size get a preview
const DIFF_MAX_LINES = 5000;     // lines of a diff shown; the rest is a download away
const REST_METRICS_EVERY = 10000; // ms between looks at the master's series while running
const ARTIFACTS_EVERY = 15000;   // ms between artifact lists while running

export function mount(root, ctx) {
  const id = ctx.params.id;
  const ac = new AbortController();
  let t = null;
  let stream = null;
  const cleanups = [];
  const series = new Map();       // metric name -> [[step, value], ...]
  const logNames = new Set();     // names the log's metric lines gave
  const times = new Map();        // metric name -> Map(step -> the Unix second the master read it at)
  // The x axis of the metric charts (step, relative, wall), one for all of
  // them and kept in the URL; the sys/* charts are on time whatever it is.
  let xMode = ctx.query.get('x') || 'step';
  let resumes = [];               // {attempt, step}: an attempt ≥ 2's first metric step, from the master
  let metricPartial = '';
  let chartsDirty = false;
  const charts = new Map();       // name -> LineChart
  let showAllCharts = false;
  const markers = [];             // {attempt, line}
  let smooth = ctx.query.has('smooth') ? Number(ctx.query.get('smooth')) || 0 : 0.6;
  const record = recordBox((nt) => setTask(nt));
  const smoothCtl = smoothingControl('run-smooth', smooth, (a) => {
    smooth = a;
    for (const c of charts.values()) c.setSmoothing(a);
    const u = new URLSearchParams(location.search);
    u.set('smooth', String(a));
    history.replaceState(null, '', location.pathname + '?' + u + location.hash);
  });
  let destroyed = false;

  const head = h('div');
  const summary = h('section', { class: 'stat-strip', 'aria-label': 'Run summary' });
  const chartsBox = h('div', { class: 'charts', id: 'charts' });
  const chartsMore = h('div');
  const chartsNote = h('p', { class: 'muted', id: 'charts-note' }, 'Waiting for metric lines (', h('code', null, 'RLSCHED_METRIC {"step": n, "name": value}'), ').');
  const details = h('div', { class: 'grid grid-2' });
  const timelineBox = h('section', { class: 'card', id: 'timeline' });
  const codeBox = h('section', { class: 'card', id: 'code' });
  const artifactsBox = h('section', { class: 'card', id: 'artifacts' });
  const artifactsBody = h('div');
  const artifactsPreview = h('div', { id: 'artifact-preview', hidden: true });
  let artifactAttempt = '';       // '' = the newest version of each file
  let artifactsShown = '';        // the attempts the selector offers, to rebuild it only on change

  // ---- the log ----
  const view = new LogView();
  const logInfo = h('span', { class: 'info', id: 'log-info' }, 'loading…');
  const followBtn = h('button', { type: 'button', class: 'btn btn-primary btn-sm follow-btn', hidden: true, id: 'follow' }, '↓ Follow');
  followBtn.addEventListener('click', () => view.setFollow(true));
  view.onFollowChange = (on) => { followBtn.hidden = on; };
  const dl = h('button', { type: 'button', class: 'btn btn-sm' }, 'Download');
  // A multi-node group's member whose log is shown (rank 0's is the run's:
  // its metrics, its live stream); the picker appears for a group.
  let logRank = 0;
  const rankPick = h('select', { id: 'log-rank', 'aria-label': 'Log of rank', hidden: true, style: { width: 'auto', height: '28px' } });
  rankPick.addEventListener('change', () => {
    logRank = Number(rankPick.value) || 0;
    if (stream) stream.stop();
    view.clear();
    startStream();
  });
  dl.addEventListener('click', async () => {
    dl.disabled = true;
    try { await downloadLog(id, logRank); } catch (e) { toast('Download failed: ' + e.message, 'error'); } finally { dl.disabled = false; }
  });
  const findIn = h('input', { type: 'search', placeholder: 'Find in log', 'aria-label': 'Find in log', id: 'log-find' });
  findIn.style.width = '170px';
  findIn.style.height = '28px';
  let findFrom = 0;
  findIn.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || !findIn.value) return;
    e.preventDefault();
    let n = view.find(findIn.value, findFrom);
    if (n < 0 && findFrom > 0) n = view.find(findIn.value, 0);
    if (n < 0) { toast('Not found in the log'); return; }
    view.scrollToLine(n);
    findFrom = n + 1;
  });
  findIn.addEventListener('input', () => { findFrom = 0; });
  // Metric lines are most of a training log: a reader may leave them out.
  const HIDE_KEY = 'rlsched.log.hideMetrics';
  const hideCb = h('input', { type: 'checkbox', id: 'log-hide-metrics' });
  try { hideCb.checked = localStorage.getItem(HIDE_KEY) === '1'; } catch { /* private mode */ }
  view.setHideMetrics(hideCb.checked);
  hideCb.addEventListener('change', () => {
    view.setHideMetrics(hideCb.checked);
    try { localStorage.setItem(HIDE_KEY, hideCb.checked ? '1' : '0'); } catch { /* private mode */ }
  });
  const hideToggle = h('label', { class: 'toggle', for: 'log-hide-metrics', title: 'Leave the RLSCHED_METRIC lines out of the view (the download keeps them)' },
    hideCb, h('span', null, 'Hide metric lines'));
  // Long lines wrap on request (by default on a phone), up to WRAP_MAX
  // lines; a longer log is drawn unwrapped, scrolling sideways.
  const WRAP_KEY = 'rlsched.log.wrap';
  const wrapCb = h('input', { type: 'checkbox', id: 'log-wrap' });
  let wrapWanted = window.matchMedia('(max-width: 760px)').matches;
  try { const v = localStorage.getItem(WRAP_KEY); if (v !== null) wrapWanted = v === '1'; } catch { /* private mode */ }
  wrapCb.checked = wrapWanted;
  view.setWrap(wrapWanted);
  view.onWrapChange = (on) => { wrapCb.checked = on; wrapToggle.title = on || !wrapWanted ? 'Wrap long lines' : 'This log is over ' + WRAP_MAX.toLocaleString() + ' lines: too long to wrap'; };
  wrapCb.addEventListener('change', () => {
    wrapWanted = wrapCb.checked;
    view.setWrap(wrapWanted);
    if (wrapWanted && !view.wrap) { wrapCb.checked = false; toast('This log is over ' + WRAP_MAX.toLocaleString() + ' lines: too long to wrap; Download has it whole'); }
    try { localStorage.setItem(WRAP_KEY, wrapWanted ? '1' : '0'); } catch { /* private mode */ }
  });
  const wrapToggle = h('label', { class: 'toggle', for: 'log-wrap', title: 'Wrap long lines' }, wrapCb, h('span', null, 'Wrap'));
  const logEmpty = h('div', { class: 'log-empty' }, 'No output yet');
  // An interactive run's terminal, for its owner while it runs (terminalview.js).
  let term = null;
  const termBox = h('div');
  cleanups.push(() => term && term.destroy());
  const logCard = h('section', { class: 'logbox', id: 'log', 'aria-label': 'Log' },
    h('div', { class: 'logbar' }, h('h2', { style: { margin: '0' } }, 'Log'), rankPick, logInfo, h('span', { class: 'spacer' }), hideToggle, wrapToggle, findIn, dl),
    view.el, logEmpty, followBtn);
  cleanups.push(() => view.destroy());

  const warnBox = h('section', { class: 'notice warn run-warnings', id: 'warnings', hidden: true, 'aria-label': 'Warnings' });
  // The last lines of a failed run's log (errorTail): why it failed, without opening the log.
  const tailBox = h('section', { class: 'card error-tail', id: 'error-tail', hidden: true, 'aria-label': 'End of the log' });
  replace(root, head, record.el, summary, warnBox, tailBox,
    h('section', { class: 'card', id: 'metrics' }, h('div', { class: 'card-head' }, h('h2', null, 'Metrics'), h('span', { class: 'spacer' }), smoothCtl), chartsNote, chartsBox, chartsMore),
    h('div', { style: { height: '16px' } }),
    termBox,
    logCard,
    h('div', { style: { height: '16px' } }),
    details,
    h('div', { style: { height: '16px' } }),
    h('div', { class: 'grid grid-2' }, timelineBox, codeBox),
    h('div', { style: { height: '16px' } }),
    artifactsBox);
  replace(artifactsBox, h('div', { class: 'card-head' }, h('h2', null, 'Artifacts'), h('span', { class: 'spacer' }), h('span', { id: 'artifact-attempt-box' })),
    artifactsBody, artifactsPreview);

  // ---- header, summary, details ----
  let confirming = false;
  function renderHead() {
    const canCancel = mayCancel(ctx.user, t) && !TERMINAL.has(t.status);
    const sel = loadSelection();
    const inCompare = sel.has(t.id);
    const actions = h('div', { class: 'btn-row' });
    if (confirming && canCancel) {
      const yes = h('button', { type: 'button', class: 'btn btn-danger solid btn-sm', id: 'confirm-cancel' }, 'Yes, cancel it');
      const no = h('button', { type: 'button', class: 'btn btn-ghost btn-sm' }, 'Keep running');
      yes.addEventListener('click', doCancel);
      no.addEventListener('click', () => { confirming = false; renderHead(); });
      actions.appendChild(h('span', { class: 'confirm', role: 'alertdialog', 'aria-label': 'Confirm cancel' }, 'Cancel this run?', yes, no));
      setTimeout(() => yes.focus(), 0);
    } else if (canCancel) {
      const b = h('button', { type: 'button', class: 'btn btn-danger btn-sm', id: 'cancel-run' }, 'Cancel run');
      b.addEventListener('click', () => { confirming = true; renderHead(); });
      actions.appendChild(b);
    }
    const rerun = h('button', { type: 'button', class: 'btn btn-sm', id: 'rerun' }, 'Rerun');
    rerun.addEventListener('click', async () => {
      rerun.disabled = true;
      try {
        const r = await api.rerun(t.id);
        toast('Rerun queued');
        ctx.navigate('/runs/' + r.id);
      } catch (e) {
        toast('Rerun failed: ' + e.message, 'error');
        rerun.disabled = false;
      }
    });
    const cmp = h('button', { type: 'button', class: 'btn btn-sm', 'aria-pressed': String(inCompare) }, inCompare ? '✓ In compare' : 'Add to compare');
    cmp.addEventListener('click', () => {
      const s = loadSelection();
      if (s.has(t.id)) s.delete(t.id); else s.add(t.id);
      saveSelection(s);
      renderHead();
    });
    // A notebook's web app, for its owner while it runs (the master
    // refuses anyone else).
    const app = sessionURL(t);
    const appOpen = app && t.status === 'RUNNING' && ctx.user && ctx.user.id === t.userId;
    if (appOpen) {
      actions.appendChild(h('a', { class: 'btn btn-primary btn-sm', id: 'open-session', href: app, target: '_blank', rel: 'noopener' }, 'Open app'));
    }
    const edit = record.button();
    if (edit) actions.appendChild(edit);
    actions.append(rerun, h('a', { class: 'btn btn-sm', href: '/submit?from=' + encodeURIComponent(t.id) }, 'Edit & resubmit'), cmp);
    if (sel.size > 0) actions.appendChild(h('a', { class: 'btn btn-ghost btn-sm', href: '/compare?ids=' + [...sel].join(',') }, 'Compare ' + sel.size));

    replace(head, h('div', { class: 'page-head' },
      h('div', { style: { minWidth: '0' } },
        h('div', { class: 'run-title' }, h('h1', { id: 'run-name' }, t.name || t.id), badge(t.status, 'lg'),
          t.baseline ? h('span', { class: 'tag baseline', id: 'run-baseline', title: 'Marked as a baseline by its owner' }, 'baseline') : null),
        h('div', { class: 'run-meta' },
          h('span', null, 'by ', h('strong', null, t.user)),
          t.project ? h('span', null, 'project ', h('a', { href: '/runs?project=' + encodeURIComponent(t.project) }, t.project)) : null,
          h('span', null, 'id ', h('code', null, t.id)),
          t.sweepId ? h('span', null, 'member of sweep ', h('a', { href: '/sweeps/' + t.sweepId, id: 'run-sweep' }, t.sweepId)) : null,
          t.rerunOf ? h('span', null, 'rerun of ', h('a', { href: '/runs/' + t.rerunOf, id: 'run-rerun-of' }, t.rerunOf)) : null,
          app ? h('span', { id: 'run-session-url' }, 'app at ', h('code', null, location.origin + app),
            appOpen ? null : h('span', { class: 'muted' }, ' (its owner’s, while it runs)')) : null,
          (t.tags || []).length ? h('span', null, (t.tags || []).map((x) => h('span', { class: 'tag' }, x))) : null)),
      h('span', { class: 'spacer' }),
      actions));
    ctx.setTitle(t.name || t.id);
  }

  async function doCancel() {
    try {
      const nt = await api.cancel(t.id);
      confirming = false;
      toast('Cancel requested');
      setTask(nt);
    } catch (e) {
      confirming = false;
      toast('Cannot cancel: ' + e.message, 'error');
      renderHead();
    }
  }

  function lastReward() {
    if (t.finalReward != null) return { v: t.finalReward, note: TERMINAL.has(t.status) ? 'final' : 'so far' };
    const s = series.get('episode_reward');
    if (s && s.length) return { v: s[s.length - 1][1], note: 'latest episode_reward' };
    return null;
  }

  function renderSummary() {
    const now = Date.now();
    let statusDetail = '';
    if (t.status === 'QUEUED') {
      statusDetail = [t.queuePosition ? '#' + t.queuePosition + ' in queue' : '', t.pendingReason || ''].filter(Boolean).join(' · ') || 'waiting for a worker';
    } else if (t.status === 'RUNNING' || t.status === 'DISPATCHED') {
      statusDetail = t.worker ? 'on ' + t.worker + ((t.gpuIndices || []).length ? ' · GPU ' + t.gpuIndices.join(', ') : '') : '';
    } else if (t.exitCode != null) {
      statusDetail = [exitText(t), endError(t)].filter(Boolean).join(' · ');
    } else if (t.error) statusDetail = t.error;
    const r = lastReward();
    // Every attempt's running time, not only the last one's.
    const atts = attemptsOf().filter((a) => a.started != null);
    const dur = (t.attempt || 1) > 1 && atts.length ? atts.reduce((sum, a) => sum + Math.max(0, (a.ended ?? (TERMINAL.has(t.status) ? a.started : now)) - a.started), 0) : runDuration(t, now);
    const firstStart = atts.length ? atts[0].started : parseTime(t.startedAt);
    replace(summary,
      h('div', { class: 'stat', id: 'stat-status' }, h('div', { class: 'label' }, 'Status'), h('div', { class: 'value sm' }, badge(t.status)), h('div', { class: 'detail', id: 'status-detail' }, statusDetail)),
      h('div', { class: 'stat' }, h('div', { class: 'label' }, TERMINAL.has(t.status) ? 'Final reward' : 'Reward'), h('div', { class: 'value', id: 'final-reward' }, r ? fmtNum(r.v) : '—'), h('div', { class: 'detail' }, r ? r.note : TERMINAL.has(t.status) ? 'none reported' : 'none yet')),
      h('div', { class: 'stat' }, h('div', { class: 'label' }, 'Duration'), h('div', { class: 'value', id: 'duration' }, dur == null ? '—' : fmtDuration(dur)),
        h('div', { class: 'detail' }, firstStart != null ? 'started ' + fmtTime(firstStart) + ((t.attempt || 1) > 1 ? ' · ' + t.attempt + ' attempts' : '') : 'submitted ' + fmtTime(parseTime(t.createdAt)))),
      h('div', { class: 'stat' }, h('div', { class: 'label' }, 'Placement'), h('div', { class: 'value sm', id: 'placement' }, placement(t)), h('div', { class: 'detail' }, t.gpus ? t.gpus + ' GPU' + (t.gpus === 1 ? '' : 's') + ' requested' : 'CPU slot')),
      h('div', { class: 'stat' }, h('div', { class: 'label' }, 'Attempt'), h('div', { class: 'value' }, String(t.attempt || 1)), h('div', { class: 'detail', id: 'attempt-detail' }, t.preemptions
        // Preempted attempts are not retries: they do not count against maxRetries.
        ? 'preempted ' + t.preemptions + '×' + (t.preemptedAt ? ', last at ' + fmtTime(parseTime(t.preemptedAt)) : '') + ' · retries ' + (t.maxRetries || 0)
        : 'of at most ' + ((t.maxRetries || 0) + 1))));
    renderWarnings();
    renderErrorTail();
  }

  function renderErrorTail() {
    tailBox.hidden = !t.errorTail;
    replace(tailBox, t.errorTail ? [h('div', { class: 'card-head' }, h('h2', null, 'End of the log'), h('span', { class: 'spacer' }),
      h('a', { href: '#log' }, 'Full log')), h('pre', { class: 'mono' }, t.errorTail)] : null);
  }

  // renderWarnings lists what the run's record says beyond its status: a
  // GPU taken by a process rlsched did not start, idle GPUs, outputs not kept.
  function renderWarnings() {
    const ws = t.warnings || [];
    warnBox.hidden = !ws.length;
    replace(warnBox, ws.length ? h('ul', null, ws.map((w) => h('li', { dataset: { code: w.code } },
      h('code', null, w.code), ' ', w.message, w.at ? h('span', { class: 'muted' }, ' · ' + fmtTime(parseTime(w.at))) : null))) : null);
  }

  function kvTable(obj, empty) {
    const entries = Object.entries(obj || {});
    if (!entries.length) return h('p', { class: 'muted' }, empty);
    return h('table', { class: 'kvtable' }, h('tbody', null, entries.map(([k, v]) => h('tr', null, h('th', { class: 'mono' }, k), h('td', { class: 'mono' }, paramText(v))))));
  }

  function renderDetails() {
    const cmd = shellQuote(t.command);
    const code = t.code || {};
    replace(details,
      h('section', { class: 'card', id: 'details-command' },
        h('h2', null, 'Command'),
        h('div', { class: 'cmdline' }, h('code', { id: 'command' }, cmd), copyButton(() => cmd)),
        h('div', { style: { height: '14px' } }),
        h('h3', null, 'Params'),
        kvTable(paramsOf(t), 'No params.'),
        h('div', { style: { height: '14px' } }),
        h('h3', null, 'Environment'),
        kvTable(t.env, 'No extra variables.')),
      h('section', { class: 'card', id: 'details-meta' },
        h('h2', null, 'Record'),
        h('dl', { class: 'kv' },
          h('dt', null, 'Code'), h('dd', null, code.gitCommit ? h('a', { href: '#code' }, h('code', null, code.gitCommit.slice(0, 12))) : h('span', { class: 'faint' }, 'not recorded'), code.gitDirty ? h('span', { class: 'tag' }, 'dirty') : null),
          h('dt', null, 'Worker'), h('dd', null, t.worker ? h('a', { href: '/workers' }, t.worker) : h('span', { class: 'faint' }, 'not placed yet')),
          h('dt', null, 'GPUs'), h('dd', null, (t.gpuIndices || []).length ? (t.gpuIndices.length === 1 ? 'GPU ' : 'GPUs ') + t.gpuIndices.join(', ') : (t.gpus ? t.gpus + ' requested' : 'none (CPU)')),
          t.nodes > 1 ? h('dt', null, 'Nodes') : null, t.nodes > 1 ? h('dd', { id: 'run-nodes' }, t.nodes + ' workers at once, the GPUs, cores and memory above on each (a multi-node group: ranks 0–' + (t.nodes - 1) + (t.worker ? ', rank 0 on ' + t.worker : '') + '; the log picks a rank)') : null,
          h('dt', null, 'Cores'), h('dd', { id: 'run-cpus' }, t.cpus ? String(t.cpus) : h('span', { class: 'faint' }, 'no limit')),
          h('dt', null, 'Memory'), h('dd', { id: 'run-memory' }, t.memoryMb ? fmtBytes(t.memoryMb * 1048576) : h('span', { class: 'faint' }, 'no limit')),
          t.reason ? h('dt', null, 'Ended by') : null, t.reason ? h('dd', { id: 'run-reason' }, h('code', null, t.reason)) : null,
          t.usage ? h('dt', null, 'Used') : null, t.usage ? h('dd', { id: 'run-usage' }, usageText(t.usage)) : null,
          h('dt', null, 'Workdir'), h('dd', null, t.workdir ? h('code', null, t.workdir) : h('span', { class: 'faint' }, "worker's default")),
          t.python ? h('dt', null, 'Python') : null,
          t.python ? h('dd', { id: 'run-python' }, t.python.venv ? ['venv ', h('code', null, t.python.venv)] : ['built from ', h('code', null, t.python.requirements)]) : null,
          h('dt', null, 'Outputs'), h('dd', { id: 'outputs-visibility' }, t.private ? 'private: its owner and admins' : 'shared as the server allows'),
          h('dt', null, 'Priority'), h('dd', null, String(t.priority || 0)),
          h('dt', null, 'Retries'), h('dd', null, String(t.maxRetries)),
          h('dt', null, 'Timeout'), h('dd', null, t.timeoutSeconds ? fmtDuration(t.timeoutSeconds * 1000) : 'none'),
          h('dt', null, 'Trace id'), h('dd', null, h('code', null, t.traceId || '')),
          h('dt', null, 'Submitted'), h('dd', null, fmtTime(parseTime(t.createdAt))),
          h('dt', null, 'Started'), h('dd', null, fmtTime(parseTime(t.startedAt)) || '—'),
          h('dt', null, 'Finished'), h('dd', null, fmtTime(parseTime(t.finishedAt)) || '—'),
          h('dt', null, 'Rerun of'), h('dd', null, t.rerunOf ? h('a', { href: '/runs/' + t.rerunOf }, t.rerunOf) : h('span', { class: 'faint' }, '—')),
          h('dt', null, 'Reruns'), rerunsBox)));
  }

  // The reruns of this run: GET /api/tasks?rerunOf=, newest first.
  const rerunsBox = h('dd', { id: 'reruns' }, h('span', { class: 'faint' }, '…'));
  async function loadReruns() {
    try {
      const r = await api.tasks({ rerunOf: id, limit: 20 }, ac.signal);
      replace(rerunsBox, r.items.length
        ? h('ul', { class: 'reruns' }, r.items.map((x) => h('li', null, h('a', { href: '/runs/' + x.id }, x.name || x.id), ' ', badge(x.status))),
          r.nextCursor ? h('li', null, h('a', { href: '/runs?rerunOf=' + encodeURIComponent(id) }, 'all reruns')) : null)
        : h('span', { class: 'faint' }, 'none'));
    } catch (e) {
      if (e.name !== 'AbortError') replace(rerunsBox, h('span', { class: 'faint' }, 'cannot list: ' + e.message));
    }
  }

  // attemptsOf folds the run's history (every state change, API.md) into
  // one span per attempt: when it was queued, sent, started, how it ended.
  function attemptsOf() {
    const out = [];
    let cur = null;
    for (const e of t.history || []) {
      const at = parseTime(e.at);
      if (!cur || e.attempt !== cur.attempt) {
        // After a preemption the next attempt has no QUEUED entry of its own: it waited from then.
        const prev = cur;
        cur = { attempt: e.attempt, queued: e.status === 'QUEUED' || !prev ? at : (prev.ended ?? at), dispatched: null, started: null, ended: null, end: null, worker: '' };
        out.push(cur);
      }
      switch (e.status) {
        case 'QUEUED': if (cur.queued == null) cur.queued = at; break;
        case 'DISPATCHED': cur.dispatched = at; cur.worker = e.worker || cur.worker; break;
        case 'RUNNING': cur.started = at; cur.worker = e.worker || cur.worker; break;
        default: cur.ended = at; cur.end = e; // LOST, PREEMPTED or the run's end
      }
    }
    // A run without a history entry for its start (an old run) keeps its fields'.
    const last = out[out.length - 1];
    if (last && last.started == null && t.startedAt && last.attempt === (t.attempt || 1)) last.started = parseTime(t.startedAt);
    return out;
  }

  function endItem(a, ran) {
    const e = a.end;
    const when = h('div', { class: 'when' }, fmtTime(a.ended) + (ran != null ? ' · ran ' + fmtDuration(ran) : ''));
    if (e.status === 'PREEMPTED') {
      const by = /^preempted by \S+ \(priority -?\d+\)$/.test(e.reason || '') ? e.reason : 'preempted';
      return h('li', { class: 'warn', id: 'timeline-preempted' }, h('div', null, 'Attempt ' + a.attempt + ': ' + by.charAt(0).toUpperCase() + by.slice(1)), when);
    }
    if (e.status === 'LOST') {
      return h('li', { class: 'warn' }, h('div', null, 'Attempt ' + a.attempt + ' lost'), e.reason ? h('div', { class: 'muted' }, e.reason) : null, when);
    }
    const final = e.status === t.status;
    return h('li', { class: e.status === 'SUCCEEDED' ? 'ok' : 'bad' },
      h('div', null, badge(e.status), final && exitText(t) ? ' ' + exitText(t) : ''),
      final ? (endError(t) ? h('div', { class: 'muted' }, endError(t)) : null) : (e.reason ? h('div', { class: 'muted' }, e.reason) : null),
      when);
  }

  function renderTimeline() {
    const created = parseTime(t.createdAt);
    const now = Date.now();
    const attempts = attemptsOf();
    const finished = parseTime(t.finishedAt);
    const end = finished ?? now;
    const total = Math.max(1, end - (created ?? end));
    // One bar: each attempt's wait, then its run, coloured by how it ended.
    const bar = h('div', { class: 'timebar', 'aria-hidden': 'true' });
    const seg = (cls, from, to, title) => {
      if (from == null || to == null || to <= from) return;
      const sp = h('span', { class: cls, title });
      sp.style.width = ((to - from) / total) * 100 + '%';
      bar.appendChild(sp);
    };
    for (const a of attempts) {
      const stop = a.ended ?? end;
      seg('q', a.queued, a.started ?? stop, 'Attempt ' + a.attempt + ' waited');
      const how = a.end ? a.end.status : '';
      // Its hover says where it ran and why it ended (a LOST one's reason names the worker).
      const why = how ? ': ' + how.toLowerCase() + (a.end.reason ? ' (' + a.end.reason + ')' : '') : '';
      seg(['r', how === 'SUCCEEDED' && 'done', ['FAILED', 'TIMEOUT', 'CANCELLED'].includes(how) && 'bad', ['LOST', 'PREEMPTED'].includes(how) && 'lost'], a.started, stop,
        'Attempt ' + a.attempt + ' on ' + (a.worker || t.worker || '?') + why);
    }
    const items = [h('li', null, h('div', null, 'Submitted by ', h('strong', null, t.user)), h('div', { class: 'when' }, fmtTime(created)))];
    for (const a of attempts) {
      if (a.started != null) {
        const m = markers.find((x) => x.attempt === a.attempt);
        let logLink = null;
        if (m) {
          logLink = h('a', { href: '#log' }, 'log line ' + (m.line + 1));
          logLink.addEventListener('click', (e) => { e.preventDefault(); view.scrollToLine(m.line); view.el.focus(); });
        }
        const cur = a.attempt === (t.attempt || 1) && !TERMINAL.has(t.status);
        items.push(h('li', { class: 'run', dataset: { attempt: String(a.attempt) } },
          h('div', null, attempts.length > 1 || (t.attempt || 1) > 1 ? 'Attempt ' + a.attempt + ' on ' : 'Running on ', h('strong', null, a.worker || t.worker || '?'),
            cur && (t.gpuIndices || []).length ? ' · GPU ' + t.gpuIndices.join(', ') : ''),
          h('div', { class: 'when' }, fmtTime(a.started) + (a.queued != null ? ' · waited ' + fmtDuration(a.started - a.queued) : ''), logLink ? ' · ' : '', logLink)));
      }
      if (a.end) items.push(endItem(a, a.started != null ? a.ended - a.started : null));
    }
    const lastA = attempts[attempts.length - 1];
    if (!TERMINAL.has(t.status) && !(lastA && lastA.started != null && !lastA.end)) {
      // The current attempt has not started: it waits, or is on its way to a worker.
      const n = (t.attempt || 1) > 1 ? 'Attempt ' + t.attempt + ' ' : '';
      items.push(h('li', null, h('div', null, t.status === 'QUEUED' ? (n ? n + 'waiting' : 'Waiting') + ' in the queue' + (t.queuePosition ? ' · #' + t.queuePosition : '')
        : t.status === 'DISPATCHED' ? (n || '') + 'Sent to ' + (t.worker || 'a worker') : t.status), h('div', { class: 'when' }, t.pendingReason || '')));
    }
    replace(timelineBox, h('h2', null, 'Timeline'), bar, h('ol', { class: 'timeline', id: 'timeline-list' }, items));
  }

  // ---- code ----
  let codeSig = null;
  function renderCode() {
    const c = t.code || {};
    const sig = JSON.stringify(c);
    if (sig === codeSig) return; // an open diff stays open across live updates
    codeSig = sig;
    if (!c.gitCommit && !c.hasDiff && !c.diffOmitted) {
      replace(codeBox, h('h2', null, 'Code'), h('p', { class: 'muted' }, 'No git commit recorded: the run was not submitted from a git repository by the CLI.'),
        snapshotDetails(id, c, ac.signal));
      return;
    }
    const remote = c.gitRemote || '';
    const rows = [
      h('dt', null, 'Commit'), h('dd', null, c.gitCommit ? h('code', { id: 'code-commit' }, c.gitCommit) : h('span', { class: 'faint' }, 'none'),
        ' ', c.gitDirty ? h('span', { class: 'tag', id: 'code-dirty' }, 'dirty') : h('span', { class: 'tag' }, 'clean')),
      h('dt', null, 'Remote'), h('dd', { id: 'code-remote' }, remote
        ? (/^https?:\/\//.test(remote) ? h('a', { href: remote, rel: 'noreferrer noopener', target: '_blank' }, remote) : h('code', null, remote))
        : h('span', { class: 'faint' }, 'none')),
    ];
    let diffPart;
    if (c.hasDiff && !mayCancel(ctx.user, t)) {
      diffPart = h('p', { class: 'muted', id: 'diff-note' }, 'The uncommitted changes are recorded; only the owner and admins can read them (a diff can hold secrets).');
    } else if (c.hasDiff) {
      diffPart = diffDetails();
    } else if (c.diffOmitted) {
      diffPart = h('p', { class: 'muted', id: 'diff-note' }, 'Uncommitted changes not recorded: ' + c.diffOmitted);
    } else {
      diffPart = h('p', { class: 'muted', id: 'diff-note' }, c.gitDirty ? 'The work tree was dirty; no diff was recorded.' : 'The work tree was clean: the commit is the code.');
    }
    replace(codeBox, h('h2', null, 'Code'), h('dl', { class: 'kv' }, rows), diffPart, snapshotDetails(id, c, ac.signal));
  }

  // diffDetails is the diff, collapsed; opening it fetches and shows it.
  function diffDetails() {
    const body = h('div', { class: 'muted' }, 'Loading…');
    const raw = h('a', { href: api.codeDiffURL(id), download: id + '.diff', class: 'btn btn-ghost btn-sm' }, 'Download .diff');
    const d = h('details', { class: 'more', id: 'code-diff' }, h('summary', null, 'Uncommitted changes (git diff HEAD)'), body, h('div', { class: 'btn-row', style: { marginTop: '8px' } }, raw));
    let loaded = false;
    d.addEventListener('toggle', async () => {
      if (!d.open || loaded) return;
      loaded = true;
      try {
        const text = new TextDecoder('utf-8').decode(await api.bytes(api.codeDiffURL(id), ac.signal));
        replace(body, diffView(text));
      } catch (e) {
        loaded = false;
        if (e.name !== 'AbortError') replace(body, h('p', { class: 'notice error' }, 'Cannot load the diff: ' + e.message));
      }
    });
    return d;
  }

  // ---- artifacts ----
  function renderAttemptSelector() {
    const box = document.getElementById('artifact-attempt-box');
    const n = t ? (t.attempt || 1) : 1;
    const want = n > 1 ? String(n) : '';
    if (!box || want === artifactsShown) return;
    artifactsShown = want;
    if (n <= 1) { clear(box); return; }
    const opts = [h('option', { value: '' }, 'Newest of each file')];
    for (let a = 1; a <= n; a++) opts.push(h('option', { value: String(a) }, 'Attempt ' + a));
    const sel = h('select', { id: 'artifact-attempt', 'aria-label': 'Files of attempt' }, opts);
    sel.value = artifactAttempt;
    sel.addEventListener('change', () => { artifactAttempt = sel.value; loadArtifacts(); });
    replace(box, sel);
  }

  let artifactsSig = null;
  async function loadArtifacts() {
    renderAttemptSelector();
    const want = artifactAttempt;
    try {
      const r = await api.artifacts(id, want || undefined, ac.signal);
      if (want !== artifactAttempt) return; // the selector moved on meanwhile
      const items = r.items || [];
      const sig = want + '|' + JSON.stringify(items);
      if (sig === artifactsSig) return;
      artifactsSig = sig;
      if (!items.length) {
        replace(artifactsBody, h('p', { class: 'muted', id: 'artifacts-empty' }, want ? 'Attempt ' + want + ' left no files.'
          : TERMINAL.has(t.status) ? 'This run left no files on the master.' : 'Files the run writes to $RLSCHED_OUTPUT_DIR appear here as they are uploaded.'));
        return;
      }
      const total = items.reduce((n, a) => n + (a.size || 0), 0);
      replace(artifactsBody,
        h('div', { class: 'table-wrap' }, h('table', { class: 'data artifact-table', id: 'artifacts-table' },
          h('thead', null, h('tr', null, h('th', null, 'Path'), h('th', { class: 'num' }, 'Size'), h('th', { class: 'num hide-sm' }, 'Attempt'), h('th', { class: 'hide-sm' }, 'Modified'), h('th', null, ''))),
          h('tbody', null, items.map((a) => artifactRow(a, want))))),
        h('p', { class: 'faint', style: { margin: '8px 2px 0' } }, items.length + ' file' + (items.length === 1 ? '' : 's') + ' · ' + fmtBytes(total)));
    } catch (e) {
      if (e.name !== 'AbortError') replace(artifactsBody, h('p', { class: 'muted' }, 'Cannot list the files: ' + e.message));
    }
  }

  function artifactRow(a, attempt) {
    const url = api.artifactURL(id, a.path, attempt || undefined);
    const modified = parseTime(a.modifiedAt);
    const actions = h('td', { class: 'nowrap' }, h('a', { class: 'btn btn-ghost btn-sm', href: url, download: a.path.split('/').pop() }, 'Download'));
    if (a.size <= PREVIEW_MAX) {
      const b = h('button', { type: 'button', class: 'btn btn-sm preview-btn' }, 'Preview');
      b.addEventListener('click', () => preview(a, url));
      actions.prepend(b);
    }
    return h('tr', { dataset: { path: a.path } },
      h('td', { class: 'mono path' }, h('a', { href: url, download: a.path.split('/').pop() }, a.path)),
      h('td', { class: 'num nowrap', title: a.size + ' bytes' }, fmtBytes(a.size)),
      // On a phone the path and the buttons get the width.
      h('td', { class: 'num hide-sm' }, String(a.attempt || '')),
      h('td', { class: 'nowrap hide-sm', title: a.modifiedAt || '' }, modified ? fmtTime(modified) : '—'),
      actions);
  }

  // preview shows a small file below the table: text escaped (it goes in
  // as a text node), JSON pretty-printed, anything else refused.
  async function preview(a, url) {
    artifactsPreview.hidden = false;
    const close = h('button', { type: 'button', class: 'btn btn-ghost btn-sm', 'aria-label': 'Close the preview' }, 'Close');
    close.addEventListener('click', () => { artifactsPreview.hidden = true; clear(artifactsPreview); });
    const head = h('div', { class: 'card-head', style: { marginTop: '14px' } }, h('strong', { class: 'mono' }, a.path), h('span', { class: 'faint' }, fmtBytes(a.size)), h('span', { class: 'spacer' }), close);
    replace(artifactsPreview, head, h('p', { class: 'muted' }, 'Loading…'));
    let body;
    try {
      const bytes = await api.bytes(url, ac.signal);
      body = previewBody(a.path, bytes);
    } catch (e) {
      if (e.name === 'AbortError') return;
      body = h('p', { class: 'notice error' }, 'Cannot load ' + a.path + ': ' + e.message);
    }
    replace(artifactsPreview, head, body);
  }

  // ---- metrics ----  // ---- metrics ----
  // addPoint adds a point of a log line. A step at or before the last one
  // (a resumed attempt playing episodes again, a step printed twice) replaces
  // the points from there on, as the master keeps one value per step.
  function addPoint(name, step, v) {
    let s = series.get(name);
    if (!s) { s = []; series.set(name, s); }
    logNames.add(name);
    while (s.length && s[s.length - 1][0] >= step) s.pop();
    s.push([step, v]);
    chartsDirty = true;
  }

  function scanMetrics(text) {
    let s = metricPartial + text;
    const nl = s.lastIndexOf('\n');
    if (nl < 0) { metricPartial = s.length > 1 << 20 ? '' : s; return; }
    metricPartial = s.slice(nl + 1);
    s = s.slice(0, nl);
    let i = s.indexOf(METRIC);
    while (i >= 0) {
      const lineEnd = s.indexOf('\n', i);
      const lineStart = s.lastIndexOf('\n', i) + 1;
      const line = s.slice(lineStart, lineEnd < 0 ? s.length : lineEnd);
      const j = line.indexOf(METRIC);
      try {
        const m = JSON.parse(line.slice(j + METRIC.length));
        if (m && typeof m === 'object' && !Array.isArray(m)) {
          const step = typeof m.step === 'number' ? Math.trunc(m.step) : 0;
          for (const [k, v] of Object.entries(m)) if (k !== 'step' && k !== RESUME_METRIC && typeof v === 'number' && Number.isFinite(v) && k.length <= 128) addPoint(k, step, v);
        }
      } catch { /* not a metric line */ }
      if (lineEnd < 0) break;
      i = s.indexOf(METRIC, lineEnd);
    }
  }

  function scanMarkers(text, firstLine) {
    if (!text.includes('=== rlsched attempt ')) return;
    const lines = text.split('\n').slice(0, -1); // the last piece is unfinished
    lines.forEach((l, k) => {
      const m = l.match(/^=== rlsched attempt (\d+) ===/);
      if (m) markers.push({ attempt: Number(m[1]), line: firstLine + k });
    });
    if (t) renderTimeline();
  }

  let lastChart = 0;
  function renderCharts() {
    chartsDirty = false;
    lastChart = Date.now();
    const names = [...series.keys()].sort((a, b) => (a === 'episode_reward' ? -1 : b === 'episode_reward' ? 1 : a.localeCompare(b)));
    chartsNote.hidden = names.length > 0;
    if (!names.length && t && TERMINAL.has(t.status) && stream && stream.eof) {
      replace(chartsNote, 'This run reported no metrics (lines like ', h('code', null, 'RLSCHED_METRIC {"step": 1, "loss": 0.5}'), ').');
    }
    const shown = showAllCharts ? names : names.slice(0, MAX_CHARTS);
    for (const [n, c] of charts) if (!shown.includes(n)) { c.destroy(); c.el.remove(); charts.delete(n); }
    shown.forEach((n, i) => {
      let c = charts.get(n);
      if (!c) {
        // The system series (sys/…) are stepped by the sample's Unix
        // second: a time axis, from the run's start.
        // A logged series gets the time modes too once the master has
        // the times of its points; both start "since" the run's start.
        const time = n.startsWith('sys/');
        const origin = t && t.startedAt ? Math.floor(parseTime(t.startedAt) / 1000) : undefined;
        c = new LineChart({ title: n, name: n, height: 200, empty: 'No points yet', legend: false, xKind: time ? 'time' : 'step', origin,
          onView: time ? undefined : (v) => setXMode(v.xMode) });
        if (!time) c.setView({ xMode });
        c.setSmoothing(smooth);
        charts.set(n, c);
        chartsBox.appendChild(c.el);
      }
      const tm = times.get(n);
      const pts = tm ? series.get(n).map((p) => [p[0], p[1], tm.get(p[0])]) : series.get(n);
      c.set([{ id: n, label: n, color: PALETTE[i % PALETTE.length], points: pts }], resumes.map((r) => ({ step: r.step, label: 'attempt ' + r.attempt })));
    });
    clear(chartsMore);
    if (names.length > MAX_CHARTS) {
      const b = h('button', { type: 'button', class: 'btn btn-sm' }, showAllCharts ? 'Show fewer' : 'Show all ' + names.length + ' metrics');
      b.addEventListener('click', () => { showAllCharts = !showAllCharts; renderCharts(); });
      chartsMore.appendChild(h('div', { style: { marginTop: '12px' } }, b));
    }
    if (t) renderSummary();
  }

  // mergeRestMetrics takes the master's series: those the log does not
  // carry (TensorBoard scalars, GPU samples) always; one the log gave too
  // only once the run is over (final), when the master has seen every line,
  // and only when it has more points.
  async function mergeRestMetrics(final) {
    try {
      const r = await api.metrics(id, null, ac.signal, true);
      let changed = false;
      for (const [n, pts] of Object.entries(r.series || {})) {
        const clean = pts.filter((p) => p[0] != null && p[1] != null).map((p) => [p[0], p[1]]);
        let tm = times.get(n);
        for (const p of pts) {
          if (p[0] == null || p[2] == null || (tm && tm.get(p[0]) === p[2] / 1000)) continue;
          if (!tm) { tm = new Map(); times.set(n, tm); }
          tm.set(p[0], p[2] / 1000);
          changed = true;
        }
        if (n === RESUME_METRIC) { // where each attempt ≥ 2 resumed: marks, not a chart
          const next = clean.map(([step, a]) => ({ step, attempt: a }));
          if (JSON.stringify(next) !== JSON.stringify(resumes)) { resumes = next; changed = true; }
          continue;
        }
        const mine = series.get(n);
        if (logNames.has(n) && !(final && clean.length > (mine ? mine.length : 0))) continue;
        if (mine && mine.length === clean.length && (!clean.length || mine[mine.length - 1][0] === clean[clean.length - 1][0])) continue;
        series.set(n, clean);
        changed = true;
      }
      if (changed) renderCharts();
    } catch { /* keep what the log gave */ }
  }

  function setXMode(m) {
    if (m === xMode) return;
    xMode = m;
    for (const [n, c] of charts) if (!n.startsWith('sys/')) c.setView({ xMode });
    const u = new URLSearchParams(location.search);
    if (m === 'step') u.delete('x'); else u.set('x', m);
    history.replaceState(null, '', location.pathname + (String(u) ? '?' + u : '') + location.hash);
  }

  // ---- task updates ----
  function setTask(nt) {
    if (!nt || nt.id !== id) return;
    const prev = t;
    // An attempt never leaves its end: a view that says otherwise is older
    // than the one shown (the cancel request's answer, read before the run
    // ended, can arrive after the live event of its end).
    if (prev && nt.attempt === prev.attempt && TERMINAL.has(prev.status) && !TERMINAL.has(nt.status)) return;
    if (prev && nt.status === 'QUEUED' && prev.status === 'QUEUED') {
      nt.queuePosition ??= prev.queuePosition;
      nt.pendingReason ??= prev.pendingReason;
    }
    t = nt;
    record.set(t, ctx.user);
    renderHead();
    renderSummary();
    renderDetails();
    renderTimeline();
    renderCode();
    renderAttemptSelector();
    if (t.nodes > 1 && rankPick.options.length !== t.nodes) {
      rankPick.replaceChildren(...Array.from({ length: t.nodes }, (_, r) =>
        h('option', { value: String(r) }, 'rank ' + r + (r === 0 && t.worker ? ' · ' + t.worker : ''))));
      rankPick.value = String(logRank);
      rankPick.hidden = false;
    }
    if (!term && t.kind === 'interactive' && t.status === 'RUNNING' && ctx.user && ctx.user.id === t.userId) {
      term = new TerminalView(id);
      replace(termBox, term.el, h('div', { style: { height: '16px' } }));
    }
    if (TERMINAL.has(t.status) && (!prev || !TERMINAL.has(prev.status))) {
      if (stream) stream.runEnded();
      loadArtifacts();
    }
  }

  async function refreshTask() {
    try {
      setTask(await api.task(id, ac.signal));
    } catch (e) {
      if (e.status === 404) {
        replace(root, h('div', { class: 'empty' }, h('strong', null, 'No run ' + id), h('a', { href: '/runs' }, 'Back to the runs')));
        destroy();
      }
    }
  }

  function onTaskFrame(m) {
    if (m.type === 'subscribed' || m.type === 'lagged') { refreshTask(); return; }
    if (m.type === 'task' && m.data && m.data.id === id) {
      setTask(m.data);
      if (m.data.status === 'QUEUED') refreshTask(); // for the queue position
    }
  }

  // startStream follows the log of logRank (rank 0's: the run's, whose
  // metric lines and markers it also reads).
  let finalMerged = false;
  function startStream() {
    const rank = logRank;
    stream = new LogStream(id, {
      rank,
      onText: (text) => {
        const firstLine = view.lineCount - (view.partial ? 1 : 0);
        if (rank === 0) scanMarkers(view.partial + text, firstLine);
        view.append(text);
        if (rank === 0) scanMetrics(text);
      },
      onProgress: (p) => {
        updateLogInfo(p);
        if (rank !== 0) return;
        if (chartsDirty && Date.now() - lastChart > 250) renderCharts();
        if (p.eof) renderCharts();
        // The whole log is read: the master's series, which saw every line
        // (and may keep points a capped log lost), get their say.
        if (p.eof && !finalMerged) { finalMerged = true; mergeRestMetrics(true); }
      },
      onError: (e) => { logInfo.textContent = 'log: ' + e.message + ' (retrying)'; },
    });
    stream.start().then(() => { if (TERMINAL.has(t.status)) stream.runEnded(); });
  }

  function updateLogInfo(p) {
    const lines = view.lineCount;
    logEmpty.hidden = lines > 0;
    logEmpty.textContent = p.eof ? 'The run printed nothing' : 'No output yet';
    const state = p.eof ? 'complete' : (p.live ? 'live' : 'polling every 2 s');
    logInfo.textContent = lines.toLocaleString('en-US') + ' line' + (lines === 1 ? '' : 's') + ' · ' + fmtBytes(p.next) + ' · ' + state;
    logInfo.dataset.state = p.eof ? 'eof' : p.live ? 'live' : 'polling';
    if (view.dropped) logInfo.textContent += ' · first ' + view.dropped.toLocaleString('en-US') + ' lines not kept (Download has them)';
  }

  function destroy() {
    if (destroyed) return;
    destroyed = true;
    ac.abort();
    if (stream) stream.stop();
    for (const c of charts.values()) c.destroy();
    for (const f of cleanups) f();
  }

  (async () => {
    let first;
    try {
      first = await api.task(id, ac.signal);
    } catch (e) {
      if (e.name === 'AbortError') return;
      replace(root, e.status === 404
        ? h('div', { class: 'empty' }, h('strong', null, 'No run ' + id), h('a', { href: '/runs' }, 'Back to the runs'))
        : h('div', { class: 'notice error' }, 'Cannot load run ' + id + ': ' + e.message));
      return;
    }
    if (destroyed) return;
    setTask(first);
    loadReruns();
    renderCharts();
    if (!TERMINAL.has(t.status)) loadArtifacts();
    mergeRestMetrics(false);
    const outputsPoll = setInterval(() => { if (!TERMINAL.has(t.status)) loadArtifacts(); }, ARTIFACTS_EVERY);
    cleanups.push(() => clearInterval(outputsPoll));
    const metricsPoll = setInterval(() => { if (!TERMINAL.has(t.status)) mergeRestMetrics(false); }, REST_METRICS_EVERY);
    cleanups.push(() => clearInterval(metricsPoll));
    cleanups.push(live.subscribe('/topic/tasks', onTaskFrame));
    const stopPoll = poller(async () => { if (!TERMINAL.has(t.status)) await refreshTask(); }, 2000, '/topic/tasks');
    cleanups.push(stopPoll);
    startStream();
    const tick = setInterval(() => {
      if (chartsDirty) renderCharts();
      if (t && !TERMINAL.has(t.status)) {
        const d = document.getElementById('duration');
        const dur = runDuration(t);
        if (d && dur != null) d.textContent = fmtDuration(dur);
      }
    }, 500);
    cleanups.push(() => clearInterval(tick));
    const slow = setInterval(() => { if (t && !TERMINAL.has(t.status)) renderTimeline(); }, 5000);
    cleanups.push(() => clearInterval(slow));
  })();

  return destroy;
}

// usageText is what an ended run used (Task.usage).
function usageText(u) {
  return fmtNum(u.cpuSeconds) + ' CPU-seconds · peak ' + fmtBytes((u.peakMemoryMb || 0) * 1048576) + ' · ' + fmtNum(u.gpuSeconds) + ' GPU-seconds';
}

// exitText says how the process ended. A negative code is the worker's
// mark for "no exit status" (it was killed, or never started), not a number
// worth showing; the error, when there is one, says which.
function exitText(t) {
  if (t.exitCode == null) return '';
  if (t.exitCode >= 0) return 'exit code ' + t.exitCode;
  return t.status === 'CANCELLED' || t.status === 'TIMEOUT' ? 'stopped by a signal' : '';
}

// endError is the run's error unless it only repeats its status or its
// exit code ("exit code 3 · exit code 3").
function endError(t) {
  const e = (t.error || '').toLowerCase();
  return e && e !== (t.status || '').toLowerCase() && e !== exitText(t).toLowerCase() ? t.error : '';
}

// diffView renders a diff as lines (text nodes: nothing in it is markup),
// added, removed, hunk and file lines marked for colour; past
// DIFF_MAX_LINES lines a note says the download has the rest.
function diffView(text) {
  const lines = text.split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  const kind = (l) => (l.startsWith('diff ') || l.startsWith('index ') || l.startsWith('+++ ') || l.startsWith('--- ') ? 'meta'
    : l.startsWith('@@') ? 'hunk' : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : l.startsWith('Binary files ') ? 'meta' : null);
  const shown = lines.slice(0, DIFF_MAX_LINES);
  const pre = h('pre', { class: 'diffview', id: 'diff-text', tabindex: '0', 'aria-label': 'Diff' }, shown.map((l) => h('span', { class: kind(l) }, l + '\n')));
  const files = lines.filter((l) => l.startsWith('diff --git ')).length;
  const added = lines.filter((l) => l.startsWith('+') && !l.startsWith('+++ ')).length;
  const removed = lines.filter((l) => l.startsWith('-') && !l.startsWith('--- ')).length;
  return h('div', null,
    h('p', { class: 'faint', id: 'diff-stat', style: { margin: '0 0 6px' } }, files + ' file' + (files === 1 ? '' : 's') + ' changed, ' + added + ' line' + (added === 1 ? '' : 's') + ' added, ' + removed + ' removed'),
    pre,
    lines.length > DIFF_MAX_LINES ? h('p', { class: 'muted' }, 'Showing the first ' + DIFF_MAX_LINES.toLocaleString('en-US') + ' of ' + lines.length.toLocaleString('en-US') + ' lines; the download has them all.') : null);
}

// previewBody shows a small file: JSON pretty-printed, other UTF-8 text as
// it is, anything else (a NUL, bytes that are not UTF-8) as binary.
function previewBody(path, bytes) {
  let text;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    text = null;
  }
  if (text === null || text.includes('\u0000')) return h('p', { class: 'muted' }, 'A binary file (' + fmtBytes(bytes.length) + '): download it to look inside.');
  if (/\.json$/i.test(path) || /^\s*[{[]/.test(text)) {
    try {
      text = JSON.stringify(JSON.parse(text), null, 2);
    } catch { /* not JSON after all: shown as text */ }
  }
  return h('pre', { class: 'preview', id: 'preview-text', tabindex: '0' }, text);
}
