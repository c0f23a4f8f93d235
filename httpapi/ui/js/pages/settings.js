// Settings: the signed-in user's own password, a token for scripts, the
// webhook rlsched notifies and what their runs' outputs keep (PUT
// /api/auth/me/password, POST /api/auth/me/token,
// /api/auth/me/notifications, GET /api/auth/me).

import { api } from '../api.js';
import { fmtBytes, h, replace, toast } from '../util.js';

export function mount(root, ctx) {
  const ac = new AbortController();

  // ---- password ----
  const cur = h('input', { type: 'password', id: 'pw-current', autocomplete: 'current-password' });
  const next = h('input', { type: 'password', id: 'pw-new', autocomplete: 'new-password', minlength: '8' });
  const again = h('input', { type: 'password', id: 'pw-again', autocomplete: 'new-password' });
  const pwErr = h('div', { class: 'err', role: 'alert', id: 'pw-err' });
  const pwBtn = h('button', { type: 'submit', class: 'btn btn-primary', id: 'pw-save' }, 'Change password');
  const pwForm = h('form', { id: 'pw-form', novalidate: true },
    h('div', { class: 'form-grid' },
      h('div', { class: 'field' }, h('label', { for: 'pw-current' }, 'Current password'), cur),
      h('div', { class: 'field' }, h('label', { for: 'pw-new' }, 'New password'), next, h('div', { class: 'hint' }, 'At least 8 characters')),
      h('div', { class: 'field' }, h('label', { for: 'pw-again' }, 'New password again'), again)),
    pwErr, h('div', { class: 'form-actions' }, pwBtn));
  pwForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    pwErr.textContent = '';
    if (next.value !== again.value) { pwErr.textContent = 'The two new passwords differ.'; again.focus(); return; }
    pwBtn.disabled = true;
    try {
      await api.changePassword(cur.value, next.value);
      cur.value = next.value = again.value = '';
      toast('Password changed; your other sign-ins and tokens have ended');
    } catch (err) {
      pwErr.textContent = err.message;
    } finally {
      pwBtn.disabled = false;
    }
  });

  // ---- a token for scripts ----
  const tokOut = h('input', { type: 'text', class: 'mono', id: 'token-out', readonly: true, hidden: true, 'aria-label': 'Your new token' });
  const tokHint = h('p', { class: 'muted', id: 'token-hint', hidden: true });
  const tokBtn = h('button', { type: 'button', class: 'btn', id: 'token-new' }, 'Make a token');
  tokBtn.addEventListener('click', async () => {
    tokBtn.disabled = true;
    try {
      const t = await api.newToken();
      tokOut.value = t.token;
      tokOut.hidden = false;
      tokOut.select();
      replace(tokHint, 'Valid until ' + new Date(t.expiresAt).toLocaleString() + '. Use it as ', h('code', null, 'export RLSCHED_TOKEN=…'),
        ' for the CLI, ', h('code', null, 'Client(token=…)'), ' in Python, or ', h('code', null, 'Authorization: Bearer …'),
        '. Changing your password or signing out ends it.');
      tokHint.hidden = false;
    } catch (err) {
      toast('Cannot make a token: ' + err.message, 'error');
    } finally {
      tokBtn.disabled = false;
    }
  });

  // ---- notifications ----
  const hook = h('input', { type: 'url', id: 'hook-url', placeholder: 'https://hooks.slack.com/services/…', autocomplete: 'off' });
  const on = h('input', { type: 'text', id: 'hook-on', placeholder: 'FAILED, SUCCEEDED, …', autocomplete: 'off' });
  const hookErr = h('div', { class: 'err', role: 'alert', id: 'hook-err' });
  const hookState = h('p', { class: 'muted', id: 'hook-state' }, 'Loading…');
  const save = h('button', { type: 'submit', class: 'btn btn-primary', id: 'hook-save' }, 'Save');
  const test = h('button', { type: 'button', class: 'btn', id: 'hook-test' }, 'Send a test');
  const off = h('button', { type: 'button', class: 'btn btn-ghost', id: 'hook-off' }, 'Turn off');
  const hookForm = h('form', { id: 'hook-form', novalidate: true },
    hookState,
    h('div', { class: 'form-grid' },
      h('div', { class: 'field span-2' }, h('label', { for: 'hook-url' }, 'Webhook URL'), hook),
      h('div', { class: 'field' }, h('label', { for: 'hook-on' }, 'Events'), on, h('div', { class: 'hint' }, 'Run statuses and warning codes, comma-separated; empty: the defaults'))),
    hookErr, h('div', { class: 'form-actions' }, save, test, off));
  function show(n) {
    hook.value = n.webhook || '';
    on.value = (n.on || []).join(', ');
    hookState.textContent = n.webhook ? 'Notifying ' + n.webhook + ' of ' + (n.on || []).join(', ') + '. A sweep sends one message when it ends, not one per member.' : 'No webhook: rlsched sends you nothing.';
    test.disabled = !n.webhook;
    off.disabled = !n.webhook;
  }
  async function put(url, events) {
    hookErr.textContent = '';
    try {
      show(await api.setNotifications(url, events));
      toast(url ? 'Webhook saved' : 'Notifications off');
    } catch (err) {
      hookErr.textContent = err.message;
    }
  }
  hookForm.addEventListener('submit', (e) => {
    e.preventDefault();
    put(hook.value.trim(), on.value.split(',').map((x) => x.trim()).filter(Boolean));
  });
  off.addEventListener('click', () => put('', []));
  test.addEventListener('click', async () => {
    hookErr.textContent = '';
    try {
      const r = await api.testNotification();
      if (r.sent) toast('Test message sent to ' + r.webhook);
      else hookErr.textContent = 'Not delivered: ' + r.error;
    } catch (err) {
      hookErr.textContent = err.message;
    }
  });
  // ---- stored outputs ----
  const stored = h('p', { class: 'muted', id: 'outputs-kept' }, 'Loading…');
  api.me().then((m) => {
    if (ac.signal.aborted) return;
    stored.textContent = 'The output files of all your runs keep ' + fmtBytes(m.artifactBytes || 0) +
      (m.artifactLimitBytes > 0 ? ' of the ' + fmtBytes(m.artifactLimitBytes) + ' this server allows you (ARTIFACT_MAX_MB_PER_USER): past it, new files are not kept.' : '; this server sets no limit.');
  }).catch((e) => { stored.textContent = 'Cannot read what your outputs keep: ' + e.message; });

  api.notifications(ac.signal).then(show).catch((e) => { if (e.name !== 'AbortError') hookState.textContent = 'Cannot read your notifications: ' + e.message; });

  replace(root,
    h('div', { class: 'page-head' }, h('h1', null, 'Settings'), h('span', { class: 'muted' }, 'signed in as ' + ctx.user.username)),
    h('section', { class: 'card', id: 'settings-password' }, h('h2', null, 'Password'), pwForm),
    h('section', { class: 'card', id: 'settings-token' }, h('h2', null, 'A token for scripts'),
      h('p', { class: 'muted' }, 'The CLI saves one at ', h('code', null, 'rlsched login'), ' (', h('code', null, 'rlsched token'), ' prints it); make one here for a notebook, a CI job or curl.'),
      tokBtn, tokOut, tokHint),
    h('section', { class: 'card', id: 'settings-notify' }, h('h2', null, 'Notifications'), hookForm),
    h('section', { class: 'card', id: 'settings-outputs' }, h('h2', null, 'Stored outputs'), stored));
  return () => ac.abort();
}
