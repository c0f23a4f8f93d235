// REST client for API.md. The login token lives in the HttpOnly jwt_token
// cookie: this code never sees it, the browser sends it with every request.

export class ApiError extends Error {
  constructor(status, code, message, traceId) {
    super(message || code || 'HTTP ' + status);
    this.status = status;
    this.code = code || '';
    this.traceId = traceId || '';
  }
}

// A hint (not a secret) that this browser signed in, so a first visit goes
// straight to the sign-in page instead of asking the API and getting a 401.
const SIGNED_IN = 'rlsched.signedIn';
export const session = {
  get hinted() { try { return localStorage.getItem(SIGNED_IN) === '1'; } catch { return true; } },
  set hinted(v) { try { v ? localStorage.setItem(SIGNED_IN, '1') : localStorage.removeItem(SIGNED_IN); } catch { /* private mode */ } },
};

async function errorOf(res) {
  let code = '', message = '', traceId = res.headers.get('X-Trace-Id') || '';
  try {
    const b = await res.json();
    if (b && b.error) ({ code, message } = b.error);
    else if (b && b.message) message = b.message; // the gateway's fallback shape
    if (b && b.error && b.error.traceId) traceId = b.error.traceId;
  } catch { /* not JSON */ }
  if (!message) message = res.status === 503 ? 'The service is unavailable; try again shortly.' : 'Request failed (HTTP ' + res.status + ').';
  return new ApiError(res.status, code, message, traceId);
}

// request sends one API call and returns the decoded JSON (null for 204).
// A 401 on anything but the auth endpoints announces 'rl:unauthorized'.
export async function request(path, { method = 'GET', body, signal, headers = {} } = {}) {
  const init = { method, headers: { Accept: 'application/json', ...headers }, credentials: 'same-origin', signal };
  // Every state-changing request is JSON, body or not: the server refuses
  // a cookie-signed one that is not (a page of another site cannot send it).
  if (body !== undefined || method !== 'GET') init.headers['Content-Type'] = 'application/json';
  if (body !== undefined) init.body = JSON.stringify(body);
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', 'Cannot reach the server; check the connection.');
  }
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401 && !path.startsWith('/api/auth/')) {
      window.dispatchEvent(new CustomEvent('rl:unauthorized'));
    }
    throw err;
  }
  if (res.status === 204) return null;
  return res.json();
}

const enc = encodeURIComponent;

function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  const s = u.toString();
  return s ? '?' + s : '';
}

export const api = {
  me: () => request('/api/auth/me'),
  changePassword: (current, next) => request('/api/auth/me/password', { method: 'PUT', body: { current, new: next } }),
  newToken: () => request('/api/auth/me/token', { method: 'POST' }),
  notifications: (signal) => request('/api/auth/me/notifications', { signal }),
  setNotifications: (webhook, on) => request('/api/auth/me/notifications', { method: 'PUT', body: { webhook, on } }),
  testNotification: () => request('/api/auth/me/notifications/test', { method: 'POST' }),
  login: (username, password) => request('/api/auth/login', { method: 'POST', body: { username, password } }),
  register: (username, password) => request('/api/auth/register', { method: 'POST', body: { username, password } }),
  logout: () => request('/api/auth/logout', { method: 'POST' }),

  tasks: (q = {}, signal) => request('/api/tasks' + qs(q), { signal }),
  task: (id, signal) => request('/api/tasks/' + enc(id), { signal }),
  editTask: (id, body) => request('/api/tasks/' + enc(id), { method: 'PATCH', body }),
  compare: (q, signal) => request('/api/compare' + qs(q), { signal }),
  submit: (body) => request('/api/train', { method: 'POST', body }),
  cancel: (id) => request('/api/tasks/' + enc(id) + '/cancel', { method: 'POST' }),
  rerun: (id, body) => request('/api/tasks/' + enc(id) + '/rerun', { method: 'POST', body }),
  sparklines: (ids, name, signal) => request('/api/sparklines' + qs({ ids: ids.join(','), name }), { signal }),
  metrics: (id, names, signal, times) => request('/api/tasks/' + enc(id) + '/metrics' + qs({ names: names && names.join(','), times: times ? 'true' : undefined }), { signal }),
  // attempt: one attempt's files; absent, the newest version of each.
  artifacts: (id, attempt, signal) => request('/api/tasks/' + enc(id) + '/artifacts' + qs({ attempt }), { signal }),
  artifactURL: (id, path, attempt) => '/api/tasks/' + enc(id) + '/artifacts/' + path.split('/').map(enc).join('/') + qs({ attempt }),
  codeDiffURL: (id) => '/api/tasks/' + enc(id) + '/code.diff',
  code: (id, signal) => request('/api/tasks/' + enc(id) + '/code', { signal }),
  codeCompare: (a, b, signal) => request('/api/tasks/' + enc(a) + '/code-diff/' + enc(b), { signal }),
  codeFileURL: (id, path) => '/api/tasks/' + enc(id) + '/code/' + path.split('/').map(enc).join('/'),

  // bytes GETs a file the API serves (a diff, an artifact) as bytes.
  bytes: async (url, signal) => {
    let res;
    try {
      res = await fetch(url, { headers: { Accept: '*/*' }, credentials: 'same-origin', signal });
    } catch (e) {
      if (e && e.name === 'AbortError') throw e;
      throw new ApiError(0, 'network', 'Cannot reach the server; check the connection.');
    }
    if (!res.ok) {
      const err = await errorOf(res);
      if (res.status === 401) window.dispatchEvent(new CustomEvent('rl:unauthorized'));
      throw err;
    }
    return new Uint8Array(await res.arrayBuffer());
  },
  workers: (signal) => request('/api/workers', { signal }),
  queue: (signal) => request('/api/queue', { signal }),
  usage: (signal) => request('/api/users/usage', { signal }),
  quotas: (signal) => request('/api/admin/quotas', { signal }),
  setQuota: (user, body) => request('/api/admin/quotas/' + enc(user), { method: 'PUT', body }),
  drainWorker: (id, drain) => request('/api/workers/' + enc(id) + '/drain', { method: drain ? 'POST' : 'DELETE' }),
  forgetWorker: (id) => request('/api/workers/' + enc(id), { method: 'DELETE' }),
  users: (signal) => request('/api/admin/users', { signal }),
  addUser: (body) => request('/api/admin/users', { method: 'POST', body }),
  patchUser: (name, body) => request('/api/admin/users/' + enc(name), { method: 'PATCH', body }),
  deleteUser: (name) => request('/api/admin/users/' + enc(name), { method: 'DELETE' }),
  tasksCSV: (q = {}) => '/api/tasks' + qs({ ...q, format: 'csv' }),

  sweeps: (q = {}, signal) => request('/api/sweeps' + qs(q), { signal }),
  createSweep: (spec) => request('/api/sweeps', { method: 'POST', body: spec }),
  sweep: (id, signal) => request('/api/sweeps/' + enc(id), { signal }),
  sweepMetrics: (id, name, signal) => request('/api/sweeps/' + enc(id) + '/metrics' + qs({ name }), { signal }),
  retrySweep: (id) => request('/api/sweeps/' + enc(id) + '/retry', { method: 'POST' }),
  cancelSweep: (id) => request('/api/sweeps/' + enc(id) + '/cancel', { method: 'POST' }),
  pipeline: (id, signal) => request('/api/pipelines/' + enc(id), { signal }),
  retryPipeline: (id) => request('/api/pipelines/' + enc(id) + '/retry', { method: 'POST' }),
  sweepCSV: (id) => '/api/sweeps/' + enc(id) + '?format=csv',
  health: async (signal) => {
    // 503 still carries the health document ("status":"DOWN").
    const res = await fetch('/api/monitor/health', { headers: { Accept: 'application/json' }, credentials: 'same-origin', signal });
    try {
      return await res.json();
    } catch {
      return { status: 'DOWN', error: 'HTTP ' + res.status };
    }
  },

  // logBytes returns raw log bytes from offset (Accept: text/plain) with the
  // server's next offset and whether the run's log is complete; rank picks
  // a multi-node group's member (0 or none: the run's log, rank 0's).
  logBytes: async (id, offset, limit, signal, rank) => {
    const res = await fetch('/api/monitor/logs/' + enc(id) + qs({ offset, limit, rank: rank > 0 ? rank : undefined }), {
      headers: { Accept: 'text/plain' }, credentials: 'same-origin', signal,
    });
    if (!res.ok) {
      const err = await errorOf(res);
      if (res.status === 401) window.dispatchEvent(new CustomEvent('rl:unauthorized'));
      throw err;
    }
    const bytes = new Uint8Array(await res.arrayBuffer());
    const next = Number(res.headers.get('X-Next-Offset'));
    return { bytes, next: Number.isFinite(next) ? next : offset + bytes.length, eof: res.headers.get('X-Eof') === 'true' };
  },
};
