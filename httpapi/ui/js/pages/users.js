// Users (admins only): every account with its runs, GPU hours and last
// sign-in; change a role, disable or enable, reset a password, delete, and
// add a user. Each change goes through PATCH/DELETE /api/admin/users/{name};
// the server refuses what would leave no enabled admin, and says so.

import { api, ApiError } from '../api.js';
import { h, replace, keyed, fmtAge, parseTime, toast } from '../util.js';

export function mount(root, ctx) {
  if (!ctx.user || ctx.user.role !== 'ADMIN') {
    replace(root, h('div', { class: 'page-head' }, h('h1', null, 'Users')),
      h('div', { class: 'notice' }, 'Only admins manage users.'));
    return null;
  }
  const ac = new AbortController();
  const errBox = h('div', { class: 'notice error', hidden: true, role: 'alert' });
  const body = h('tbody', { id: 'users' });
  const table = h('div', { class: 'table-wrap' }, h('table', { class: 'data' },
    h('thead', null, h('tr', null, ['User', 'Role', 'State', 'Runs', 'GPU hours', 'Last sign-in', 'Created', ''].map((c) => h('th', { scope: 'col' }, c)))),
    body));

  const newName = h('input', { type: 'text', id: 'new-user', autocomplete: 'off', spellcheck: 'false', pattern: '[A-Za-z0-9_.\\-]{3,32}', required: true });
  const newPw = h('input', { type: 'password', id: 'new-password', autocomplete: 'new-password', minlength: '8', required: true });
  const newRole = h('select', { id: 'new-role' }, h('option', { value: 'USER' }, 'User'), h('option', { value: 'ADMIN' }, 'Admin'));
  const addForm = h('form', { class: 'card', id: 'add-user' },
    h('div', { class: 'card-head' }, h('h2', null, 'Add a user')),
    h('div', { class: 'form-grid' },
      h('div', { class: 'field' }, h('label', { for: 'new-user' }, 'Username'), newName, h('div', { class: 'hint' }, '3–32 of A–Z a–z 0–9 _ . -')),
      h('div', { class: 'field' }, h('label', { for: 'new-password' }, 'Password'), newPw, h('div', { class: 'hint' }, '8 characters to 72 bytes')),
      h('div', { class: 'field' }, h('label', { for: 'new-role' }, 'Role'), newRole)),
    h('div', { class: 'form-actions' }, h('button', { type: 'submit', class: 'btn btn-primary' }, 'Add user')));
  addForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await api.addUser({ username: newName.value.trim(), password: newPw.value, role: newRole.value });
      toast('Added ' + newName.value.trim());
      newName.value = ''; newPw.value = '';
      load();
    } catch (err) { fail(err); }
  });

  replace(root, h('div', { class: 'page-head' }, h('h1', null, 'Users')), errBox, table, addForm);

  function fail(err) {
    if (err && err.name === 'AbortError') return;
    errBox.textContent = err instanceof ApiError ? err.message : String(err);
    errBox.hidden = false;
  }

  async function change(u, patch, done) {
    errBox.hidden = true;
    try {
      await api.patchUser(u.username, patch);
      toast(done);
      load();
    } catch (err) { fail(err); }
  }

  function row(u) {
    const self = u.id === ctx.user.id;
    const role = h('select', { 'aria-label': 'Role of ' + u.username, dataset: { fk: 'role-' + u.id, role: u.username } },
      h('option', { value: 'USER', selected: u.role === 'USER' }, 'User'),
      h('option', { value: 'ADMIN', selected: u.role === 'ADMIN' }, 'Admin'));
    role.addEventListener('change', () => change(u, { role: role.value }, u.username + ' is now ' + role.value.toLowerCase()));
    const toggle = h('button', { type: 'button', class: ['btn', 'btn-sm', !u.disabled && 'btn-danger'], dataset: { fk: 'toggle-' + u.id, toggle: u.username } },
      u.disabled ? 'Enable' : 'Disable');
    toggle.addEventListener('click', () => change(u, { disabled: !u.disabled }, u.username + (u.disabled ? ' enabled' : ' disabled: their sign-ins have ended')));
    const reset = h('button', { type: 'button', class: 'btn btn-sm btn-ghost', dataset: { fk: 'reset-' + u.id } }, 'Reset password');
    reset.addEventListener('click', () => {
      const pw = window.prompt('New password for ' + u.username + ' (8 characters to 72 bytes):');
      if (pw) change(u, { password: pw }, 'New password set for ' + u.username);
    });
    const del = h('button', { type: 'button', class: 'btn btn-sm btn-ghost', dataset: { fk: 'delete-' + u.id, delete: u.username } }, 'Delete');
    del.addEventListener('click', async () => {
      if (!window.confirm('Delete ' + u.username + '? Their ' + u.runs + ' run(s) stay, owned by "deleted user ' + u.id + '".')) return;
      try {
        await api.deleteUser(u.username);
        toast('Deleted ' + u.username);
        load();
      } catch (err) { fail(err); }
    });
    const last = parseTime(u.lastLoginAt);
    return h('tr', { dataset: { user: u.username, disabled: String(u.disabled) } },
      h('td', { class: 'name' }, h('strong', null, u.username), self ? h('span', { class: 'sub' }, ' (you)') : null),
      h('td', null, role),
      h('td', null, h('span', { class: ['badge', u.disabled ? 'st-DOWN' : 'st-IDLE'] }, u.disabled ? 'disabled' : 'enabled')),
      h('td', null, h('a', { href: '/runs?user=' + encodeURIComponent(u.username) }, String(u.runs)), u.activeRuns ? h('span', { class: 'sub' }, ' · ' + u.activeRuns + ' active') : null),
      h('td', null, (u.gpuSeconds / 3600).toFixed(1)),
      h('td', { title: u.lastLoginAt || '' }, last ? fmtAge(last) : 'never'),
      h('td', { title: u.createdAt }, (u.createdAt || '').slice(0, 10)),
      h('td', null, h('div', { class: 'btn-row' }, toggle, reset, del)));
  }

  async function load() {
    try {
      const r = await api.users(ac.signal);
      keyed(body, r.items || [], (u) => u.id, (u) => JSON.stringify(u), row);
    } catch (err) { fail(err); }
  }
  load();
  return () => ac.abort();
}
