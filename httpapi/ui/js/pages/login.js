// Sign in / create an account. The login answer sets the HttpOnly cookie;
// nothing here stores the token.

import { api, ApiError } from '../api.js';
import { h, replace, safeNext } from '../util.js';

export function mount(root, ctx) {
  let mode = ctx.query.get('mode') === 'register' ? 'register' : 'login';
  const next = ctx.query.get('next');

  const user = h('input', { type: 'text', id: 'username', name: 'username', autocomplete: 'username', required: true, autocapitalize: 'off', spellcheck: 'false', 'aria-describedby': 'username-err' });
  const pass = h('input', { type: 'password', id: 'password', name: 'password', required: true, 'aria-describedby': 'password-err' });
  const userErr = h('div', { class: 'err', id: 'username-err' });
  const passErr = h('div', { class: 'err', id: 'password-err' });
  const userHint = h('div', { class: 'hint' }, '3–32 letters, digits, _ . -');
  const passHint = h('div', { class: 'hint' }, 'At least 8 characters');
  const formErr = h('div', { class: 'notice error', role: 'alert', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', id: 'auth-submit' });
  const tabLogin = h('button', { type: 'button', role: 'tab', id: 'tab-login' }, 'Sign in');
  const tabRegister = h('button', { type: 'button', role: 'tab', id: 'tab-register' }, 'Create account');

  const form = h('form', { novalidate: true, 'aria-labelledby': 'auth-title' },
    h('div', { class: 'field' }, h('label', { for: 'username' }, 'Username'), user, userHint, userErr),
    h('div', { class: 'field' }, h('label', { for: 'password' }, 'Password'), pass, passHint, passErr),
    formErr,
    submit,
  );
  const title = h('h1', { id: 'auth-title', class: 'sr-only' });

  function setMode(m) {
    mode = m;
    tabLogin.setAttribute('aria-selected', String(m === 'login'));
    tabRegister.setAttribute('aria-selected', String(m === 'register'));
    tabLogin.tabIndex = m === 'login' ? 0 : -1;
    tabRegister.tabIndex = m === 'register' ? 0 : -1;
    submit.textContent = m === 'login' ? 'Sign in' : 'Create account';
    title.textContent = m === 'login' ? 'Sign in to rlsched' : 'Create an rlsched account';
    pass.autocomplete = m === 'login' ? 'current-password' : 'new-password';
    userHint.hidden = passHint.hidden = m === 'login';
    clearErrors();
  }

  function clearErrors() {
    formErr.hidden = true;
    for (const [inp, err] of [[user, userErr], [pass, passErr]]) { inp.removeAttribute('aria-invalid'); err.textContent = ''; }
  }

  function fieldError(inp, err, msg) {
    inp.setAttribute('aria-invalid', 'true');
    err.textContent = msg;
  }

  tabLogin.addEventListener('click', () => setMode('login'));
  tabRegister.addEventListener('click', () => setMode('register'));
  for (const t of [tabLogin, tabRegister]) {
    t.addEventListener('keydown', (e) => {
      if (e.key === 'ArrowLeft' || e.key === 'ArrowRight') {
        e.preventDefault();
        const other = t === tabLogin ? tabRegister : tabLogin;
        other.click();
        other.focus();
      }
    });
  }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearErrors();
    const u = user.value.trim(), p = pass.value;
    let bad = false;
    if (mode === 'register') {
      if (!/^[A-Za-z0-9_.-]{3,32}$/.test(u)) { fieldError(user, userErr, 'Use 3–32 of letters, digits, _ . -'); bad = true; }
      if ([...p].length < 8) { fieldError(pass, passErr, 'Use at least 8 characters'); bad = true; }
    } else {
      if (!u) { fieldError(user, userErr, 'Enter your username'); bad = true; }
      if (!p) { fieldError(pass, passErr, 'Enter your password'); bad = true; }
    }
    if (bad) { form.querySelector('[aria-invalid="true"]').focus(); return; }
    submit.disabled = true;
    try {
      if (mode === 'register') await api.register(u, p);
      const res = await api.login(u, p);
      ctx.signedIn(res.user);
      ctx.navigate(safeNext(next), { replace: true });
    } catch (err) {
      const msg = err instanceof ApiError ? err.message : String(err);
      if (err.status === 409 || /username/i.test(msg)) fieldError(user, userErr, msg);
      else if (/password/i.test(msg) && err.status === 400) fieldError(pass, passErr, msg);
      else { formErr.textContent = msg; formErr.hidden = false; }
      submit.disabled = false;
    }
  });

  setMode(mode);
  replace(root, h('div', { class: 'auth-wrap' },
    h('div', { class: 'auth-card' },
      h('div', { class: 'auth-brand' },
        svgMark(), h('span', null, 'rlsched')),
      h('div', { class: 'card' },
        title,
        h('div', { class: 'tabs', role: 'tablist' }, tabLogin, tabRegister),
        form),
      h('p', { class: 'auth-foot' }, 'Training runs on shared GPUs: submit, watch, compare.'))));
  user.focus();
  return null;
}


function svgMark() {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 32 32');
  svg.setAttribute('class', 'brand-mark');
  svg.setAttribute('aria-hidden', 'true');
  const r = document.createElementNS(ns, 'rect');
  for (const [k, v] of Object.entries({ x: 2, y: 2, width: 28, height: 28, rx: 7 })) r.setAttribute(k, v);
  const p = document.createElementNS(ns, 'path');
  p.setAttribute('d', 'M8 22 L13 14 L18 18 L24 9');
  svg.append(r, p);
  return svg;
}
