// The run page's record: its note and baseline mark as the owner keeps
// them, and the form that edits name, tags, note and baseline after
// submission (PATCH /api/tasks/{id}, owner or admin, any status).

import { api } from '../api.js';
import { h, replace, mayCancel, toast } from '../util.js';

// recordBox shows t's note (or nothing) and, open, the edit form; onSaved
// gets the run as the server wrote it.
export function recordBox(onSaved) {
  const el = h('section', { class: 'record-box', id: 'run-record' });
  let open = false;
  let t = null;
  let user = null;

  function render() {
    if (!t) return;
    if (!open) {
      el.hidden = !t.note;
      replace(el, t.note ? h('p', { class: 'run-note', id: 'run-note' }, h('span', { class: 'faint' }, 'Note: '), t.note) : null);
      return;
    }
    el.hidden = false;
    const name = h('input', { type: 'text', id: 'edit-name', value: t.name || '', maxlength: '200', required: true });
    const tags = h('input', { type: 'text', id: 'edit-tags', value: (t.tags || []).join(', '), placeholder: 'paper, figure-2' });
    const note = h('textarea', { id: 'edit-note', rows: '3', maxlength: '10000', placeholder: 'What this run shows, what went wrong, what to try next' });
    note.value = t.note || '';
    const baseline = h('input', { type: 'checkbox', id: 'edit-baseline', checked: !!t.baseline });
    const save = h('button', { type: 'submit', class: 'btn btn-primary btn-sm', id: 'edit-save' }, 'Save');
    const cancel = h('button', { type: 'button', class: 'btn btn-ghost btn-sm' }, 'Cancel');
    cancel.addEventListener('click', () => { open = false; render(); });
    const form = h('form', { class: 'card record-form', id: 'record-form' },
      h('h2', null, 'Edit the record'),
      h('div', { class: 'form-grid' },
        h('div', { class: 'field span-2' }, h('label', { for: 'edit-name' }, 'Name'), name),
        h('div', { class: 'field span-2' }, h('label', { for: 'edit-tags' }, 'Tags (comma-separated)'), tags),
        h('div', { class: 'field span-2' }, h('label', { for: 'edit-note' }, 'Note'), note),
        h('label', { class: 'toggle', for: 'edit-baseline' }, baseline, h('span', null, 'Baseline: the run others are compared with'))),
      h('div', { class: 'btn-row' }, save, cancel));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      save.disabled = true;
      const body = {
        name: name.value.trim(),
        tags: tags.value.split(',').map((x) => x.trim()).filter(Boolean),
        note: note.value,
        baseline: baseline.checked,
      };
      try {
        const nt = await api.editTask(t.id, body);
        open = false;
        toast('Record saved');
        onSaved(nt);
      } catch (err) {
        toast('Cannot save: ' + err.message, 'error');
        save.disabled = false;
      }
    });
    replace(el, form);
    setTimeout(() => name.focus(), 0);
  }

  return {
    el,
    // set shows run nt for user u (a live update keeps an open form as it is).
    set(nt, u) {
      t = nt; user = u;
      if (!open) render();
    },
    // button is the header's Edit button, for those who may edit.
    button() {
      if (!t || !mayCancel(user, t)) return null;
      const b = h('button', { type: 'button', class: 'btn btn-sm', id: 'edit-record', 'aria-expanded': String(open) }, 'Edit');
      b.addEventListener('click', () => { open = !open; render(); });
      return b;
    },
  };
}
