// Pipeline page (issue 29): the steps of one pipeline drawn as a graph, a
// column per layer (a step's depth: one more than its deepest parent), each
// step a box with its status linking to its run, and its parents named
// under it; retry reruns the steps that ended without succeeding and those
// after them. Polled every 2 s.

import { api, ApiError } from '../api.js';
import { poller } from '../live.js';
import { h, replace, badge, toast } from '../util.js';

export function mount(root, ctx) {
  const id = ctx.params.id;
  const ac = new AbortController();
  const head = h('div', { class: 'page-head' });
  const errBox = h('div', { class: 'notice error', hidden: true, role: 'alert' });
  const graph = h('div', { class: 'pipeline-graph', id: 'pipeline-graph', style: { display: 'flex', gap: '2rem', overflowX: 'auto', alignItems: 'flex-start' } });
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
    replace(graph, layers.map((layer, d) => h('div', { class: 'pipeline-layer', dataset: { depth: String(d) }, style: { display: 'flex', flexDirection: 'column', gap: '0.75rem', minWidth: '12rem' } },
      layer.map((s) => h('div', { class: 'card pipeline-step', dataset: { step: s.name, status: s.status }, style: { padding: '0.5rem 0.75rem' } },
        h('div', null, h('a', { href: '/runs/' + encodeURIComponent(s.run) }, h('strong', null, s.name)), ' ', badge(s.status)),
        s.after.length ? h('div', { class: 'muted' }, 'after ' + s.after.join(', ')) : null,
        s.reason ? h('div', { class: 'muted' }, 'reason ' + s.reason) : s.pendingReason ? h('div', { class: 'muted' }, s.pendingReason) : null)))));
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
  return () => { stop(); ac.abort(); };
}
