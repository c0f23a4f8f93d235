// Pipeline page (issue 29): the steps of one pipeline drawn as a graph, a
// column per layer (a step's depth: one more than its deepest parent), each
// step a box with its status linking to its run, an arrow from each parent
// to it (coloured by the parent's status) and its parents named under it;
// retry reruns the steps that ended without succeeding and those after
// them. Polled every 2 s.

import { api, ApiError } from '../api.js';
import { poller } from '../live.js';
import { h, replace, badge, toast } from '../util.js';

export function mount(root, ctx) {
  const id = ctx.params.id;
  const ac = new AbortController();
  const head = h('div', { class: 'page-head' });
  const errBox = h('div', { class: 'notice error', hidden: true, role: 'alert' });
  const graph = h('div', { class: 'pipeline-graph', id: 'pipeline-graph', style: { display: 'flex', gap: '2rem', overflowX: 'auto', alignItems: 'flex-start', position: 'relative' } });
  let shown = null; // the pipeline drawn, for the edges' redraw on a resize
  const onResize = () => { if (shown) edges(shown); };
  window.addEventListener('resize', onResize);
  replace(root, head, errBox, h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Steps'),
    h('span', { class: 'muted' }, 'left to right: each column waits for the ones before it')), graph));

  function fail(err) {
    if (err && err.name === 'AbortError') return;
    errBox.textContent = err instanceof ApiError ? err.message : String(err);
    errBox.hidden = false;
  }

  function draw(p) {
    const retry = h('button', { type: 'button', class: 'btn btn-sm', id: 'retry-pipeline' }, 'Retry');
    retry.addEventListener('click', async () => {
      try {
        const a = await api.retryPipeline(id);
        toast(Object.keys(a.runs || {}).length + ' steps rerun');
        load();
      } catch (err) { fail(err); }
    });
    const failed = p.steps.some((s) => ['FAILED', 'CANCELLED', 'TIMEOUT'].includes(s.status));
    const mine = ctx.user.role === 'ADMIN' || ctx.user.username === p.user;
    replace(head, h('h1', null, p.name || p.id), h('span', { class: 'muted' }, 'by ' + p.user + ', ' + p.steps.length + ' steps'),
      h('span', { class: 'spacer' }), failed && mine ? retry : null);
    const layers = [];
    for (const s of p.steps) (layers[s.depth] = layers[s.depth] || []).push(s);
    replace(graph, layers.map((layer, d) => h('div', { class: 'pipeline-layer', dataset: { depth: String(d) }, style: { display: 'flex', flexDirection: 'column', gap: '0.75rem', minWidth: '12rem', position: 'relative', zIndex: '1' } },
      layer.map((s) => h('div', { class: 'card pipeline-step', dataset: { step: s.name, status: s.status }, style: { padding: '0.5rem 0.75rem' } },
        h('div', null, h('a', { href: '/runs/' + encodeURIComponent(s.run) }, h('strong', null, s.name)), ' ', badge(s.status)),
        s.after.length ? h('div', { class: 'muted' }, 'after ' + s.after.join(', ')) : null,
        s.reason ? h('div', { class: 'muted' }, 'reason ' + s.reason) : s.pendingReason ? h('div', { class: 'muted' }, s.pendingReason) : null)))));
    shown = p;
    edges(p);
  }

  // edges draws an arrow from each step's parents to it, behind the boxes,
  // from where the boxes are laid out (so they follow wrapping and scroll).
  function edges(p) {
    const box = graph.getBoundingClientRect();
    const at = new Map();
    for (const el of graph.querySelectorAll('.pipeline-step')) {
      const r = el.getBoundingClientRect();
      at.set(el.dataset.step, { x0: r.left - box.left + graph.scrollLeft, x1: r.right - box.left + graph.scrollLeft, y: (r.top + r.bottom) / 2 - box.top + graph.scrollTop });
    }
    const status = new Map(p.steps.map((s) => [s.name, s.status]));
    const paths = [];
    for (const s of p.steps) {
      const to = at.get(s.name);
      for (const a of s.after) {
        const from = at.get(a);
        if (!from || !to) continue;
        const mid = (from.x1 + to.x0) / 2;
        const st = (status.get(a) || '').toLowerCase();
        paths.push(h('svg:path', { class: 'pipeline-edge', dataset: { from: a, to: s.name }, d: `M${from.x1},${from.y} C${mid},${from.y} ${mid},${to.y} ${to.x0 - 4},${to.y}`,
          fill: 'none', stroke: `var(--st-${st || 'queued'}, var(--border-strong))`, 'stroke-width': '1.5', 'marker-end': 'url(#pipeline-arrow)' }));
      }
    }
    const old = graph.querySelector('svg.pipeline-edges');
    if (old) old.remove();
    const svg = h('svg:svg', { class: 'pipeline-edges', width: String(graph.scrollWidth), height: String(graph.scrollHeight), 'aria-hidden': 'true',
      style: { position: 'absolute', left: '0', top: '0', pointerEvents: 'none', overflow: 'visible' } },
    h('svg:defs', null, h('svg:marker', { id: 'pipeline-arrow', viewBox: '0 0 8 8', refX: '7', refY: '4', markerWidth: '7', markerHeight: '7', orient: 'auto' },
      h('svg:path', { d: 'M0,0 L8,4 L0,8 z', fill: 'var(--text-3)' }))), paths);
    graph.prepend(svg);
  }

  async function load() {
    try {
      const p = await api.pipeline(id, ac.signal);
      errBox.hidden = true;
      draw(p);
    } catch (err) { fail(err); }
  }
  load();
  const stop = poller(load, 2000);
  return () => { stop(); ac.abort(); window.removeEventListener('resize', onResize); };
}
