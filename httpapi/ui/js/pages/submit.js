// Submit: the default trainer (algorithm, episodes, learning rate) or a
// command; params as key/value rows; resources, policy and metadata. As a
// sweep, a param's comma-separated values make a grid (POST /api/sweeps)
// and each cell runs the seeds asked for.
// Mistakes are shown next to their field, from the form's own checks and
// from the API's error message.

import { api, ApiError } from '../api.js';
import { h, replace, parseArgv, shellQuote, paramsOf, paramText } from '../util.js';

const TRAINER = ['python3', '-u', '@scripts/train.py'];

function field(id, label, input, hint) {
  const err = h('div', { class: 'err', id: id + '-err', role: 'alert' });
  input.id = id;
  input.setAttribute('aria-describedby', id + '-err' + (hint ? ' ' + id + '-hint' : ''));
  const el = h('div', { class: 'field', dataset: { field: id } }, h('label', { for: id }, label), input, hint ? h('div', { class: 'hint', id: id + '-hint' }, hint) : null, err);
  return { el, input, err };
}

function num(attrs) {
  return h('input', { type: 'number', inputmode: 'numeric', ...attrs });
}

// paramValue turns the text of a value box into JSON: numbers, booleans,
// null, arrays and objects as such, anything else as a string.
function paramValue(s) {
  const t = s.trim();
  if (t === '') return '';
  if (/^(-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null)$/.test(t) || /^[[{"]/.test(t)) {
    try { return JSON.parse(t); } catch { /* a string */ }
  }
  return s;
}

export function mount(root, ctx) {
  const fields = {};
  const add = (key, f) => { fields[key] = f; return f.el; };

  // ---- what to run ----
  const modeTrainer = h('input', { type: 'radio', name: 'mode', value: 'trainer', checked: true, id: 'mode-trainer' });
  const modeCommand = h('input', { type: 'radio', name: 'mode', value: 'command', id: 'mode-command' });
  const seg = h('div', { class: 'seg', role: 'radiogroup', 'aria-label': 'What to run' },
    h('label', null, modeTrainer, h('span', null, 'Default trainer')),
    h('label', null, modeCommand, h('span', null, 'Command')));

  const algos = h('datalist', { id: 'algos' }, h('option', { value: 'PPO' }), h('option', { value: 'REINFORCE' }));
  const trainerBox = h('div', { class: 'form-grid' },
    add('algorithm', field('algorithm', 'Algorithm', h('input', { type: 'text', value: 'PPO', list: 'algos', autocomplete: 'off', spellcheck: 'false' }), 'PPO or REINFORCE for scripts/train.py')),
    add('episodes', field('episodes', 'Episodes', num({ value: '200', min: '1', max: '1000000', step: '1' }))),
    add('learningRate', field('learningRate', 'Learning rate', h('input', { type: 'text', inputmode: 'decimal', placeholder: 'trainer default', autocomplete: 'off' }))),
    algos);
  const argvPreview = h('div', { class: 'argv-preview', 'aria-label': 'Parsed argv', id: 'argv-preview' });
  const cmd = field('command', 'Command', h('input', { type: 'text', class: 'mono', placeholder: 'python3 train.py --env CartPole-v1', autocomplete: 'off', spellcheck: 'false' }),
    'Run without a shell: quotes group words; @scripts/… names the bundled scripts.');
  fields.command = cmd;
  const commandBox = h('div', { hidden: true }, cmd.el, argvPreview);
  function previewArgv() {
    const r = parseArgv(cmd.input.value);
    replace(argvPreview, r.error ? h('span', { class: 'faint' }, r.error) : r.argv.map((a) => h('code', null, a)));
  }
  cmd.input.addEventListener('input', previewArgv);
  function syncMode() {
    const trainer = modeTrainer.checked;
    trainerBox.hidden = !trainer;
    commandBox.hidden = trainer;
  }
  modeTrainer.addEventListener('change', syncMode);
  modeCommand.addEventListener('change', syncMode);

  // ---- params ----
  const paramRows = h('div', { class: 'rows', id: 'params-rows' });
  const paramsErr = h('div', { class: 'err', role: 'alert', id: 'params-err' });
  fields.params = { el: paramRows, input: null, err: paramsErr };
  function addParam(k = '', v = '') {
    const key = h('input', { type: 'text', class: 'mono param-key', placeholder: 'name (e.g. seed)', value: k, 'aria-label': 'Param name', autocomplete: 'off', spellcheck: 'false' });
    const val = h('input', { type: 'text', class: 'mono param-value', placeholder: 'value', value: v, 'aria-label': 'Param value', autocomplete: 'off', spellcheck: 'false' });
    const del = h('button', { type: 'button', class: 'btn btn-ghost btn-icon', 'aria-label': 'Remove param', title: 'Remove' }, '×');
    const err = h('div', { class: 'err' });
    const row = h('div', { class: 'kvrow' }, key, val, del, err);
    del.addEventListener('click', () => { row.remove(); paramsErr.textContent = ''; });
    paramRows.appendChild(row);
    return key;
  }
  // A sweep: each param's comma-separated values are a grid axis.
  const sweepCb = h('input', { type: 'checkbox', id: 'as-sweep' });
  const sweepInfo = h('span', { class: 'faint', id: 'sweep-size' });
  const seeds = field('seedCount', 'Seeds per cell', num({ min: '0', max: '100', step: '1', placeholder: 'none' }), 'Adds a seed param 0..n-1 to each cell');
  fields.seedCount = seeds;
  const parallel = field('maxParallel', 'At most at once', num({ min: '0', step: '1', placeholder: 'no cap' }));
  fields.maxParallel = parallel;
  const sweepBox = h('div', { class: 'form-grid', hidden: true, id: 'sweep-fields' }, seeds.el, parallel.el);
  function syncSweep() {
    sweepBox.hidden = !sweepCb.checked;
    let n = 0;
    if (sweepCb.checked) {
      try { const g = grid(); n = Object.values(g).reduce((a, vs) => a * vs.length, 1) * Math.max(1, Number(seeds.input.value) || 1); } catch { n = 0; }
    }
    sweepInfo.textContent = sweepCb.checked && n ? n + ' run' + (n === 1 ? '' : 's') : '';
    submitBtn.textContent = sweepCb.checked ? 'Submit sweep' : 'Submit run';
  }
  sweepCb.addEventListener('change', syncSweep);
  paramRows.addEventListener('input', () => { if (sweepCb.checked) syncSweep(); });
  seeds.input.addEventListener('input', syncSweep);
  const addParamBtn = h('button', { type: 'button', class: 'btn btn-sm', id: 'add-param' }, '+ Add param');
  addParamBtn.addEventListener('click', () => addParam().focus());

  // ---- env ----
  const envRows = h('div', { class: 'rows', id: 'env-rows' });
  const envErr = h('div', { class: 'err', role: 'alert' });
  fields.env = { el: envRows, input: null, err: envErr };
  function addEnv(k = '', v = '') {
    const key = h('input', { type: 'text', class: 'mono', placeholder: 'NAME', value: k, 'aria-label': 'Variable name', autocomplete: 'off', spellcheck: 'false' });
    const val = h('input', { type: 'text', class: 'mono', placeholder: 'value', value: v, 'aria-label': 'Variable value', autocomplete: 'off', spellcheck: 'false' });
    const del = h('button', { type: 'button', class: 'btn btn-ghost btn-icon', 'aria-label': 'Remove variable', title: 'Remove' }, '×');
    const row = h('div', { class: 'kvrow' }, key, val, del);
    del.addEventListener('click', () => { row.remove(); envErr.textContent = ''; });
    envRows.appendChild(row);
    return key;
  }
  const addEnvBtn = h('button', { type: 'button', class: 'btn btn-sm', id: 'add-env' }, '+ Add variable');
  addEnvBtn.addEventListener('click', () => addEnv().focus());

  // ---- resources, policy, metadata ----
  const timeoutHuman = h('span');
  const resources = h('div', { class: 'form-grid' },
    add('gpus', field('gpus', 'GPUs', num({ value: '0', min: '0', max: '64', step: '1' }), 'Claimed exclusively')),
    add('priority', field('priority', 'Priority', num({ value: '0', min: '-1000', max: '1000', step: '1' }), 'Higher runs first')),
    add('maxRetries', field('maxRetries', 'Retries', num({ value: '1', min: '0', max: '100', step: '1' }), 'Requeues after a lost worker')),
    add('timeoutSeconds', field('timeoutSeconds', 'Timeout (seconds)', num({ min: '0', step: '1', placeholder: 'no limit' }), timeoutHuman)));
  const meta = h('div', { class: 'form-grid' },
    h('div', { class: 'span-2' }, add('name', field('name', 'Name', h('input', { type: 'text', placeholder: 'derived from the algorithm or program', autocomplete: 'off' })))),
    add('project', field('project', 'Project', h('input', { type: 'text', placeholder: 'e.g. cartpole', autocomplete: 'off' }))),
    add('tags', field('tags', 'Tags', h('input', { type: 'text', placeholder: 'baseline, sweep-3', autocomplete: 'off' }), 'Comma-separated')));
  const adv = h('div', { class: 'form-grid' },
    h('div', { class: 'span-2' }, add('workdir', field('workdir', 'Working directory', h('input', { type: 'text', class: 'mono', placeholder: "the worker's default", autocomplete: 'off' })))),
    h('div', { class: 'span-2' }, add('private', field('private', 'Private outputs', h('input', { type: 'checkbox' }), 'Only you and admins may read its files and resume from them'))));
  fields.timeoutSeconds.input.addEventListener('input', () => {
    const v = Number(fields.timeoutSeconds.input.value);
    timeoutHuman.textContent = v > 0 ? '= ' + human(v) : 'Then the run ends as TIMEOUT';
  });
  timeoutHuman.textContent = 'Then the run ends as TIMEOUT';

  const formErr = h('div', { class: 'notice error', role: 'alert', hidden: true, id: 'form-error' });
  const submitBtn = h('button', { type: 'submit', class: 'btn btn-primary', id: 'submit-run' }, 'Submit run');
  const form = h('form', { novalidate: true, id: 'submit-form' },
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'What to run'), h('span', { class: 'spacer' }), seg), trainerBox, commandBox),
    h('section', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Params'), h('span', { class: 'spacer' }), addParamBtn),
      h('p', { class: 'muted' }, 'Hyperparameters are appended as ', h('code', null, '--name value'), ' and given to the run as ', h('code', null, 'RLSCHED_PARAMS'), ' (JSON). Numbers and true/false are sent as JSON values.'),
      paramRows, paramsErr,
      h('label', { class: 'toggle', for: 'as-sweep' }, sweepCb, h('span', null, 'As a sweep: values like ', h('code', null, '1e-3, 3e-4'), ' make a grid'), sweepInfo),
      sweepBox),
    h('section', { class: 'card' }, h('h2', null, 'Resources and policy'), resources),
    h('section', { class: 'card' }, h('h2', null, 'Name and grouping'), meta,
      h('details', { class: 'more' }, h('summary', null, 'Environment and working directory'),
        h('div', { class: 'card-head' }, h('h3', null, 'Environment variables'), h('span', { class: 'spacer' }), addEnvBtn), envRows, envErr, h('div', { style: { height: '12px' } }), adv)),
    formErr,
    h('div', { class: 'form-actions' }, submitBtn, h('a', { class: 'btn btn-ghost', href: '/runs' }, 'Cancel'), h('span', { class: 'faint' }, 'Ctrl+Enter submits')));

  replace(root, h('div', { class: 'page-head' }, h('h1', null, 'New run')), form);

  // ---- prefill from ?from=<id> ----
  const from = ctx.query.get('from');
  if (from) prefill(from);
  else fields.algorithm.input.focus();

  async function prefill(id) {
    try {
      const t = await api.task(id);
      const p = paramsOf(t);
      let argv = t.command || [];
      const pargs = Object.entries(p).flatMap(([k, v]) => ['--' + k, typeof v === 'string' ? v : JSON.stringify(v)]);
      if (pargs.length && argv.length >= pargs.length && argv.slice(argv.length - pargs.length).every((a, i) => a === pargs[i])) argv = argv.slice(0, argv.length - pargs.length);
      const tr = argv.length >= TRAINER.length + 4 && TRAINER.every((a, i) => argv[i] === a) && argv[3] === '--algo' && argv[5] === '--episodes';
      if (tr && (argv.length === 7 || (argv.length === 9 && argv[7] === '--lr'))) {
        modeTrainer.checked = true;
        fields.algorithm.input.value = argv[4];
        fields.episodes.input.value = argv[6];
        fields.learningRate.input.value = argv[8] || '';
      } else {
        modeCommand.checked = true;
        cmd.input.value = shellQuote(argv);
        previewArgv();
      }
      syncMode();
      for (const [k, v] of Object.entries(p)) addParam(k, paramText(v));
      // Another user's env values are not shown to us ("***"): keep the
      // names, leave the values to fill in.
      const mine = ctx.user && (ctx.user.id === t.userId || ctx.user.role === 'ADMIN');
      for (const [k, v] of Object.entries(t.env || {})) addEnv(k, mine ? v : '');
      fields.gpus.input.value = t.gpus;
      fields.priority.input.value = t.priority;
      fields.maxRetries.input.value = t.maxRetries;
      fields.timeoutSeconds.input.value = t.timeoutSeconds || '';
      fields.name.input.value = t.name || '';
      fields.project.input.value = t.project || '';
      fields.tags.input.value = (t.tags || []).join(', ');
      fields.workdir.input.value = t.workdir || '';
      fields.private.input.checked = !!t.private;
    } catch (e) {
      formErr.textContent = 'Cannot copy run ' + id + ': ' + e.message;
      formErr.hidden = false;
    }
  }

  // ---- validation ----
  function clearErrors() {
    formErr.hidden = true;
    for (const f of Object.values(fields)) {
      f.err.textContent = '';
      if (f.input) f.input.removeAttribute('aria-invalid');
    }
    for (const inp of form.querySelectorAll('[aria-invalid]')) inp.removeAttribute('aria-invalid');
    for (const e of paramRows.querySelectorAll('.err')) e.textContent = '';
  }

  function setError(key, msg, input) {
    const f = fields[key];
    if (!f) { formErr.textContent = msg; formErr.hidden = false; return formErr; }
    f.err.textContent = msg;
    const inp = input || f.input;
    if (inp) inp.setAttribute('aria-invalid', 'true');
    return inp || f.el;
  }

  function intField(key, lo, hi, what) {
    const s = fields[key].input.value.trim();
    if (s === '') return undefined;
    const n = Number(s);
    if (!Number.isInteger(n) || n < lo || n > hi) throw [key, `${what} must be a whole number from ${lo} to ${hi}`];
    return n;
  }

  // grid reads the param rows as a sweep's grid: a value with commas is a
  // list of values (each as paramValue reads it), any other one value.
  function grid() {
    const g = {};
    for (const row of paramRows.querySelectorAll('.kvrow')) {
      const [k, v] = row.querySelectorAll('input');
      const key = k.value.trim();
      if (!key && !v.value.trim()) continue;
      if (!/^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$/.test(key)) throw ['params', 'Param names are 1–64 of letters, digits, _ . - and do not start with -', k];
      if (key in g) throw ['params', `Param "${key}" appears twice`, k];
      const t = v.value.trim();
      g[key] = /^[[{"]/.test(t) ? [paramValue(t)] : t.split(',').map((x) => paramValue(x.trim())).filter((x) => x !== '');
      if (!g[key].length) throw ['params', `Param "${key}" needs a value`, v];
    }
    return g;
  }

  // buildSweep is the form as POST /api/sweeps's spec: the run as its base.
  function buildSweep() {
    const base = build();
    delete base.params;
    const g = grid();
    if (!Object.keys(g).length) throw ['params', 'A sweep needs a param, e.g. lr with the values 1e-3, 3e-4'];
    const spec = { base, grid: g };
    if (base.name) { spec.name = base.name; delete base.name; }
    if (base.project) spec.project = base.project;
    const n = intField('seedCount', 0, 100, 'Seeds per cell');
    if (n) spec.seedCount = n;
    const mp = intField('maxParallel', 0, 10000, 'At most at once');
    if (mp) spec.maxParallel = mp;
    return spec;
  }

  function build() {
    const body = {};
    if (modeTrainer.checked) {
      const a = fields.algorithm.input.value.trim();
      if (!/^[A-Za-z0-9_-]{1,32}$/.test(a)) throw ['algorithm', 'Algorithm must be 1–32 of letters, digits, _ and -'];
      body.algorithm = a;
      const ep = intField('episodes', 1, 1000000, 'Episodes');
      if (ep !== undefined) body.episodes = ep;
      const lr = fields.learningRate.input.value.trim();
      if (lr !== '') {
        const x = Number(lr);
        if (!Number.isFinite(x) || x < 0) throw ['learningRate', 'Learning rate must be a number ≥ 0'];
        body.learningRate = x;
      }
    } else {
      const r = parseArgv(cmd.input.value);
      if (r.error) throw ['command', 'Command: ' + r.error];
      if (!r.argv.length || !r.argv[0]) throw ['command', 'Enter the program to run, e.g. python3 train.py'];
      body.command = r.argv;
    }
    const params = {};
    for (const row of paramRows.querySelectorAll('.kvrow')) {
      const [k, v] = row.querySelectorAll('input');
      const key = k.value.trim();
      if (!key && !v.value.trim()) continue;
      if (!/^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,63}$/.test(key)) throw ['params', 'Param names are 1–64 of letters, digits, _ . - and do not start with -', k];
      if (key in params) throw ['params', `Param "${key}" appears twice`, k];
      params[key] = paramValue(v.value);
    }
    if (Object.keys(params).length) body.params = params;
    const env = {};
    for (const row of envRows.querySelectorAll('.kvrow')) {
      const [k, v] = row.querySelectorAll('input');
      const key = k.value.trim();
      if (!key && !v.value) continue;
      if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(key)) throw ['env', 'Variable names are identifiers: letters, digits and _, not starting with a digit', k];
      env[key] = v.value;
    }
    if (Object.keys(env).length) body.env = env;
    for (const [key, lo, hi, what] of [['gpus', 0, 64, 'GPUs'], ['priority', -1000, 1000, 'Priority'], ['maxRetries', 0, 100, 'Retries'], ['timeoutSeconds', 0, 1e9, 'Timeout']]) {
      const n = intField(key, lo, hi, what);
      if (n !== undefined) body[key] = n;
    }
    const name = fields.name.input.value.trim();
    if (name) body.name = name;
    const project = fields.project.input.value.trim();
    if (project) body.project = project;
    const tags = fields.tags.input.value.split(',').map((s) => s.trim()).filter(Boolean);
    if (tags.length > 32) throw ['tags', 'At most 32 tags'];
    if (tags.some((t) => t.length > 64)) throw ['tags', 'Tags are at most 64 characters'];
    if (tags.length) body.tags = tags;
    const wd = fields.workdir.input.value.trim();
    if (wd) body.workdir = wd;
    if (fields.private.input.checked) body.private = true;
    return body;
  }

  // serverField maps an API error message to the field it is about.
  function serverField(msg) {
    const m = msg.match(/^(?:env key|env|params|tags\[\d+\]|code\.gitCommit|[A-Za-z]+)/);
    const w = m ? m[0] : '';
    if (w.startsWith('env')) return 'env';
    if (w.startsWith('params')) return 'params';
    if (w.startsWith('tags') || /^at most \d+ tags/.test(msg)) return 'tags';
    if (/^give (either )?command|^command/.test(msg)) return modeTrainer.checked ? 'algorithm' : 'command';
    if (/^episodes and learningRate/.test(msg)) return modeTrainer.checked ? 'episodes' : 'command';
    if (/^this master has no default trainer/.test(msg)) return 'algorithm';
    return ['algorithm', 'episodes', 'learningRate', 'gpus', 'priority', 'maxRetries', 'timeoutSeconds', 'name', 'project', 'workdir'].includes(w) ? w : '';
  }

  form.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearErrors();
    let body;
    const asSweep = sweepCb.checked;
    try {
      body = asSweep ? buildSweep() : build();
    } catch (x) {
      if (!Array.isArray(x)) throw x;
      const el = setError(x[0], x[1], x[2]);
      if (el && el.focus) el.focus();
      return;
    }
    submitBtn.disabled = true;
    submitBtn.textContent = 'Submitting…';
    try {
      if (asSweep) {
        const res = await api.createSweep(body);
        ctx.navigate('/sweeps/' + res.id);
        return;
      }
      const res = await api.submit(body);
      ctx.navigate('/runs/' + res.id);
    } catch (err) {
      const msg = err instanceof ApiError ? err.message : String(err);
      const key = err.status === 400 ? serverField(msg) : '';
      let input;
      if (key === 'env' || key === 'params') {
        // Point at the row the message names ("env.X …", "env key \"X\" …", "params: name \"x\" …").
        const m = msg.match(/^env\.(\w+)/) || msg.match(/"([^"]+)"/);
        const rows = key === 'env' ? envRows : paramRows;
        if (m) input = [...rows.querySelectorAll('.kvrow input:first-child')].find((i) => i.value.trim() === m[1]);
      }
      const el = key ? setError(key, msg, input) : setError('', err.status === 429 ? 'Too many submissions; wait a few seconds and try again.' : msg);
      if (el && el.focus) el.focus();
      submitBtn.disabled = false;
      submitBtn.textContent = asSweep ? 'Submit sweep' : 'Submit run';
    }
  });
  return null;
}

function human(s) {
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return [d && d + 'd', hh && hh + 'h', m && m + 'm', sec && sec + 's'].filter(Boolean).join(' ');
}
