"""rlsched from Python: helpers for training scripts, and a client for the REST API.

Training scripts started by rlsched
-----------------------------------
The worker puts the directory holding this file on PYTHONPATH, so a run can
``import rlsched`` and report to the scheduler:

    import rlsched
    rlsched.metric(12, episode_reward=187.5)  # RLSCHED_METRIC {"step": 12, "episode_reward": 187.5}
    rlsched.final_reward(195.2)                # FINAL_REWARD:195.2
    out = rlsched.output_dir()                 # $RLSCHED_OUTPUT_DIR or ./outputs, created
    cfg = rlsched.params()                     # json.loads($RLSCHED_PARAMS) or {}

The client (a notebook, a script on a laptop)
---------------------------------------------
The master serves this file at /rlsched.py, so anything that reaches it can
fetch it; the client talks to the REST API of API.md:

    import rlsched
    c = rlsched.Client("http://127.0.0.1:8081")
    c.login("alice", "a-long-password")        # or Client(url, token="<jwt>")
    run = c.submit(algorithm="PPO", episodes=300, params={"gamma": 0.99})
    run = c.submit(command=["python3", "train.py"], code=".")  # runs a snapshot of this tree
    task = c.wait(run, timeout=600)            # the final Task, a dict
    print(task["status"], task["finalReward"])
    print(c.metrics(run)["episode_reward"][-1])    # [step, value]
    for t in c.runs(project="cartpole", status="SUCCEEDED"):
        print(t["id"], t["finalReward"])
    sw = c.sweep(base={"algorithm": "PPO", "episodes": 300},
                 grid={"lr": [3e-4, 1e-3]}, seed_count=3)
    c.wait_sweep(sw["id"], timeout=3600)
    for g in c.sweep_info(sw["id"], runs=False)["groups"]:   # best mean first
        print(g["params"], g["finalReward"], g["n"])
    c.retry_sweep(sw["id"])                    # rerun the members that failed
    for q in c.queue():                        # the serving order, and why each run waits
        print(q["position"], q["id"], q["pendingCode"], q["pendingReason"])
    c.set_quota("bob", gpus=4, runs=8)         # admins; c.usage() shows everyone's share and quota
    try:
        c.task("no-such-run")
    except rlsched.APIError as e:
        print(e.status, e.code, e.message, e.traceId)  # 404 not_found ...

Keyword arguments of submit, sweep, rerun and runs may be written in
snake_case (max_retries, seed_count); they are sent in the API's camelCase.

Only the standard library is used.
"""

import datetime
import fnmatch
import gzip
import hashlib
import json
import math
import ntpath
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["metric", "final_reward", "output_dir", "params", "Client", "APIError"]

METRIC_PREFIX = "RLSCHED_METRIC "
FINAL_PREFIX = "FINAL_REWARD:"


def metric(step, **values):
    """Print one metric line: ``RLSCHED_METRIC {"step": step, **values}``."""
    record = {"step": step}
    record.update(values)
    print(METRIC_PREFIX + json.dumps(record), flush=True)


def final_reward(x):
    """Print the run's final reward as ``FINAL_REWARD:x``."""
    print(FINAL_PREFIX + str(x), flush=True)


def output_dir():
    """Return $RLSCHED_OUTPUT_DIR (or ./outputs when unset or empty), creating it."""
    path = os.environ.get("RLSCHED_OUTPUT_DIR") or "./outputs"
    os.makedirs(path, exist_ok=True)
    return path


def params():
    """Return the run's parameters: json.loads($RLSCHED_PARAMS), or {} when unset.

    A value that is not valid JSON, or not a JSON object, gives {} and a note on stderr.
    """
    raw = os.environ.get("RLSCHED_PARAMS", "")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        print("rlsched: ignoring RLSCHED_PARAMS, not valid JSON: %s" % exc, file=sys.stderr, flush=True)
        return {}
    if not isinstance(value, dict):
        print("rlsched: ignoring RLSCHED_PARAMS, not a JSON object", file=sys.stderr, flush=True)
        return {}
    return value


# ---------------------------------------------------------------------------
# The client.

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT")

# The HTTP status the API answers with each error code (API.md "Common
# rules"), for an answer that carries no error body of its own.
_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 409: "conflict", 413: "payload_too_large", 429: "rate_limited", 503: "unavailable"}


class APIError(Exception):
    """An error the API answered (or a server that could not be reached).

    ``status`` is the HTTP status (None when no answer came), ``code`` the
    API's snake_case code (``not_found``, ``bad_request``, ...; ``unavailable``
    when the server could not be reached), ``message`` its sentence and
    ``traceId`` the request's trace id, to quote when asking an admin.
    """

    def __init__(self, status, code, message, traceId=""):
        self.status = status
        self.code = code
        self.message = message
        self.traceId = traceId
        text = "%s: %s" % (code, message)
        if status is not None:
            text = "%d %s" % (status, text)
        if traceId:
            text += " (trace %s)" % traceId
        super().__init__(text)

    @property
    def trace_id(self):
        return self.traceId


def _error_from(status, trace_id, body):
    """The APIError of an HTTP answer: API.md's error body when it has one."""
    try:
        err = json.loads(body.decode("utf-8"))["error"]
        return APIError(status, str(err["code"]), str(err.get("message", "")), str(err.get("traceId") or trace_id or ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        text = body.decode("utf-8", "replace").strip()[:300] or "HTTP %d" % status
        return APIError(status, _STATUS_CODES.get(status, "http_%d" % status), text, trace_id or "")


def _camel(name):
    """max_retries -> maxRetries; a name without '_' stays as it is."""
    head, *rest = name.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _body(fields):
    """Top-level names in camelCase; values (params, env, grid) untouched."""
    return {_camel(k): v for k, v in fields.items() if v is not None}


def _strs(v):
    """A tag or tags as a list (None stays None)."""
    if v is None:
        return None
    return [v] if isinstance(v, str) else list(v)


def _sweep_body(spec):
    """A sweep's body: its names, base's (as _run_body) and early_stop's in
    camelCase."""
    spec = dict(spec)
    if isinstance(spec.get("base"), dict):
        spec["base"] = _run_body(spec["base"])
    for k in ("early_stop", "earlyStop"):
        if isinstance(spec.get(k), dict):
            spec[k] = _body(spec[k])
    return _body(spec)


_MEMORY_UNITS = {"kib": 1.0 / 1024, "kb": 1.0 / 1024, "k": 1.0 / 1024, "mib": 1, "mb": 1, "m": 1, "": 1,
                 "gib": 1024, "gb": 1024, "g": 1024, "tib": 1 << 20, "tb": 1 << 20, "t": 1 << 20}


def _memory_mb(size):
    """A memory size as MiB, rounded up: an int is MiB already; a string such
    as "16GiB", "512MiB" or "1.5G" (MB, GB, TB are the binary units too, as
    in the CLI's --memory)."""
    if isinstance(size, bool):
        raise ValueError("memory must be a size such as \"16GiB\", not %r" % (size,))
    if isinstance(size, int):
        return size
    text = str(size).strip()
    i = 0
    while i < len(text) and (text[i].isdigit() or text[i] in ".+-"):
        i += 1
    num, unit = text[:i], text[i:].strip().lower()
    if unit not in _MEMORY_UNITS:
        raise ValueError("memory %r: unknown unit %r; use KiB, MiB, GiB or TiB (e.g. \"16GiB\")" % (size, text[i:]))
    try:
        v = float(num)
    except ValueError:
        raise ValueError("memory %r: want a positive size such as \"16GiB\"" % (size,)) from None
    if not v > 0 or v == float("inf"):
        raise ValueError("memory %r: want a positive size such as \"16GiB\"" % (size,))
    return int(math.ceil(v * _MEMORY_UNITS[unit]))


def _run_body(spec):
    """A run's fields (submit, a sweep's base) as the API names them, with
    ``memory="16GiB"`` as ``memoryMb``, and ``requirements="requirements.txt"``
    or ``venv="/shared/envs/x"`` as its ``python`` environment."""
    spec = dict(spec)
    req, venv = spec.pop("requirements", None), spec.pop("venv", None)
    if req is not None or venv is not None:
        if req is not None and venv is not None:
            raise ValueError("give requirements or venv, not both")
        if spec.get("python") is not None:
            raise ValueError("give python={...} or requirements/venv, not both")
        spec["python"] = {"requirements": req} if req is not None else {"venv": venv}
    if spec.get("memory") is not None:
        if spec.get("memory_mb") is not None or spec.get("memoryMb") is not None:
            raise ValueError("give memory or memory_mb, not both")
        spec["memory_mb"] = _memory_mb(spec.pop("memory"))
    spec.pop("memory", None)
    if spec.get("gpu_memory") is not None:
        if spec.get("gpu_memory_mb") is not None or spec.get("gpuMemoryMb") is not None:
            raise ValueError("give gpu_memory or gpu_memory_mb, not both")
        try:
            spec["gpu_memory_mb"] = _memory_mb(spec.pop("gpu_memory"))
        except ValueError as e:
            raise ValueError("gpu_" + str(e)) from None
    spec.pop("gpu_memory", None)
    if spec.get("after") is not None:
        spec["after"] = _after(spec["after"])
    if isinstance(spec.get("inputs_from"), str):
        spec["inputs_from"] = [spec["inputs_from"]]
    return _body(spec)


def _after(after):
    """A submission's after as the API takes it: a run id, or a list of run
    ids and {"run"|"sweep"|"step": id, "when": "succeeded"|"ended"|"failed"}
    dicts (a bare id waits for the run to succeed)."""
    if isinstance(after, (str, dict)):
        after = [after]
    return [{"run": a} if isinstance(a, str) else dict(a) for a in after]


def _query_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return v.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(v, (list, tuple)):
        return ",".join(_query_value(x) for x in v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _query(filters, params=None):
    """The query string of a runs() call: filters in camelCase, None dropped,
    and params={"lr": 0.001} as param.lr=0.001."""
    pairs = [(_camel(k), _query_value(v)) for k, v in sorted(filters.items()) if v is not None]
    for k, v in sorted((params or {}).items()):
        pairs.append(("param." + k, _query_value(v)))
    return urllib.parse.urlencode(pairs)


def _artifact_target(path, to):
    """Where download() writes artifact ``path``: ``to`` itself, or, when
    ``to`` is an existing directory, ``path`` inside it. A path that could
    leave that directory is refused before anything is asked, on every
    platform alike: no backslash and no drive ("C:", "\\\\host") in a
    part, since Windows reads them as separators and roots, and the joined
    path must still lie inside ``to``."""
    parts = path.split("/") if path else []
    if (not parts or "\x00" in path or path.startswith("/")
            or any(p in ("..", "") or "\\" in p or ntpath.splitdrive(p)[0] for p in parts)):
        raise ValueError("artifact path %r must be relative, without empty or '..' parts, backslashes or drives" % (path,))
    if not os.path.isdir(to):
        return to
    target = os.path.join(to, *parts)
    root = os.path.abspath(to)
    if os.path.commonpath([root, os.path.abspath(target)]) != root:
        raise ValueError("artifact path %r would leave %s" % (path, to))
    return target


_CHUNK = 1 << 20


def _pack(path):
    """The tree holding path: (root, subdir, manifest files, {sha256:
    (file, offset, size)}) as API.md "Code snapshots" has them."""
    path = os.path.abspath(path)
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, check=True)
        root = out.stdout.decode().strip()
        out = subprocess.run(["git", "-c", "core.quotePath=off", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=root, capture_output=True, check=True)
        rels = sorted(set(p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p))
    except (OSError, subprocess.CalledProcessError):
        root, rels = path, _walk(path)
    subdir = os.path.relpath(path, root).replace(os.sep, "/")
    if subdir == ".":
        subdir = ""
    files, sources = [], {}
    for rel in rels:
        full = os.path.join(root, *rel.split("/"))
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            continue  # tracked, deleted in the working tree
        if os.path.islink(full):
            target = os.readlink(full)
            files.append({"path": rel, "mode": "120000", "size": len(target.encode()),
                          "sha256": hashlib.sha256(target.encode()).hexdigest(), "target": target})
            continue
        if not os.path.isfile(full):
            continue
        whole, chunks, off = hashlib.sha256(), [], 0
        with open(full, "rb") as f:
            while True:
                b = f.read(_CHUNK)
                if not b:
                    break
                whole.update(b)
                chunks.append((hashlib.sha256(b).hexdigest(), off, len(b)))
                off += len(b)
        entry = {"path": rel, "mode": "100755" if st.st_mode & 0o111 else "100644", "size": off,
                 "sha256": whole.hexdigest()}
        if off > _CHUNK:
            entry["chunks"] = [c for c, _, _ in chunks]
            for c, o, n in chunks:
                sources[c] = (full, o, n)
        else:
            sources[entry["sha256"]] = (full, 0, off)
        files.append(entry)
    return root, subdir, files, sources


def _walk(root):
    """The files under root less what its .rlschedignore names."""
    rules = []
    try:
        with open(os.path.join(root, ".rlschedignore")) as f:
            rules = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")]
    except FileNotFoundError:
        pass

    def ignored(rel, is_dir):
        out = False
        for r in rules:
            neg = r.startswith("!")
            pat = r[1:] if neg else r
            if pat.endswith("/"):
                if not is_dir:
                    continue
                pat = pat[:-1]
            if "/" in pat:
                hit = fnmatch.fnmatchcase(rel, pat.lstrip("/"))
            else:
                hit = fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pat)
            if hit:
                out = not neg
        return out

    rels = []
    for d, dirs, names in os.walk(root):
        reld = os.path.relpath(d, root).replace(os.sep, "/")
        reld = "" if reld == "." else reld + "/"
        for x in dirs:
            if os.path.islink(os.path.join(d, x)) and not ignored(reld + x, False):
                rels.append(reld + x)  # a symlink to a directory is a symlink
        dirs[:] = [x for x in dirs if not os.path.islink(os.path.join(d, x)) and not ignored(reld + x, True)]
        rels.extend(reld + x for x in names if not ignored(reld + x, False))
    return sorted(rels)


def _etag_sha256(etag):
    """The sha256 an ETag names ("<64 hex>", maybe W/), else ""."""
    v = etag.strip()
    if v.startswith("W/"):
        v = v[2:]
    v = v.strip('"').lower()
    return v if len(v) == 64 and all(c in "0123456789abcdef" for c in v) else ""


class Client:
    """A client of one rlsched master or gateway.

    ``url`` is its base address (``http://host:8081``); ``token`` a JWT from
    login (or call ``login``). Every method raises APIError when the API
    answers an error. ``timeout`` bounds each HTTP request, in seconds.
    One Client may be used from several threads: it holds no state but the
    token.
    """

    def __init__(self, url, token=None, timeout=30.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://, e.g. http://127.0.0.1:8081")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    # -- HTTP ---------------------------------------------------------------

    def _open(self, method, path, body=None, accept="application/json", raw=None):
        data = None
        headers = {"Accept": accept}
        if raw is not None:
            data = raw
            headers["Content-Type"] = "application/octet-stream"
        elif body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
            if len(data) > 64 << 10:
                data = gzip.compress(data)
                headers["Content-Encoding"] = "gzip"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            with e:
                raise _error_from(e.code, e.headers.get("X-Trace-Id", ""), e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise APIError(None, "unavailable", "cannot reach %s: %s" % (self.url, reason)) from None

    def _json(self, method, path, body=None):
        with self._open(method, path, body) as resp:
            raw = resp.read()
            trace = resp.headers.get("X-Trace-Id", "")
            status = resp.status
        if not raw.strip():
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError:
            raise APIError(status, "bad_response", "the answer is not JSON: %r" % raw[:200], trace) from None

    @staticmethod
    def _id(run_id):
        return urllib.parse.quote(str(run_id), safe="")

    # -- auth ---------------------------------------------------------------

    def login(self, username, password):
        """Log in, keep the token for the next calls and return the answer
        ``{"token", "expiresAt", "user"}``."""
        ans = self._json("POST", "/api/auth/login", {"username": username, "password": password})
        self.token = ans["token"]
        return ans

    def me(self):
        """The signed-in user (GET /api/auth/me): ``{"id", "username",
        "role", "artifactBytes", "artifactLimitBytes"}``, the bytes all your
        runs' output files keep and ARTIFACT_MAX_MB_PER_USER in bytes (0: no
        limit)."""
        return self._json("GET", "/api/auth/me")

    # -- runs ---------------------------------------------------------------

    def submit(self, **spec):
        """Submit a run (POST /api/train) and return its id.

        ``spec`` holds the fields of API.md "Runs": ``command=[argv]`` or
        ``algorithm=``, ``episodes=``, ``learning_rate=``, then ``name``,
        ``project``, ``params={...}``, ``gpus``, ``priority``, ``max_retries``,
        ``timeout_seconds``, ``env={...}``, ``workdir``, ``tags=[...]``,
        ``cpus=`` (cores, fractions allowed) and ``memory="16GiB"`` (or
        ``memory_mb=``); without them the run gets the master's defaults.
        Where it may go (API.md "Placement"): ``gpus=0.25`` (a fraction of
        one GPU, shared with other fractional runs), ``gpu_memory="40GiB"``
        (or ``gpu_memory_mb=``), ``gpu_type="A100"`` or a list, and
        ``constraints={"pool": "a100", "!pool": "interactive"}``.
        ``after=`` makes it wait for runs (API.md "Dependencies"): a run id,
        or a list of ids and ``{"run": id, "when": "ended"}`` /
        ``{"sweep": id}`` dicts; ``inputs_from=[id]`` gives it the output
        files of those parents in ``RLSCHED_INPUT_DIR/<id>/``.
        ``nodes=4`` spans 4 workers at once (a multi-node group, ``gpus``
        on each; API.md "Multi-node groups").
        ``memory_mb=``); without them the run gets the master's defaults;
        ``requirements="requirements.txt"`` (a file of the run's code, which
        the worker builds a venv from) or ``venv="/shared/envs/x"`` (an
        existing venv on the worker) names its Python environment;
        ``image="pytorch/pytorch:2.3.0"`` runs it in that container image
        instead, with its code mounted, on a worker with podman.
        ``kind="interactive"`` queues a session to attach a terminal to
        (``rlsched attach ID``; ``command`` may then be absent, and
        ``record=False`` keeps its output out of the log). Every Task has
        ``kind``: ``"batch"`` or ``"interactive"``; ``port=8888`` with it
        serves a web app (see notebook).
        ``code="."`` (a directory) runs a snapshot of that directory's tree
        (see snapshot) instead of ``workdir`` on the worker.
        """
        return self._json("POST", "/api/train", _run_body(self._with_code(spec)))["id"]

    def _with_code(self, spec):
        """spec with a ``code`` that names a directory replaced by its
        snapshot."""
        if isinstance(spec.get("code"), str):
            spec = dict(spec, code=self.snapshot(spec["code"]))
        return spec

    def snapshot(self, path="."):
        """Upload the code tree holding ``path`` (API.md "Code snapshots") and
        return ``{"tree", "subdir"}`` for a submission's ``code``: in a git
        work tree its tracked and untracked, not ignored files as they are
        on disk; elsewhere the directory less what its .rlschedignore names
        (gitignore patterns: globs, a trailing / for directories, a leading
        / to anchor, ! to take back). Only the blobs the master lacks are
        uploaded."""
        root, subdir, files, sources = _pack(path)
        sums = list(sources)
        missing = []
        for i in range(0, max(len(sums), 1), 10000):
            missing += self._json("POST", "/api/code/missing", {"sha256": sums[i:i + 10000]})["missing"]
        for s in missing:
            full, off, size = sources[s]
            with open(full, "rb") as f:
                f.seek(off)
                data = f.read(size)
            if hashlib.sha256(data).hexdigest() != s:
                raise ValueError("%s changed while it was uploaded; try again" % full)
            with self._open("PUT", "/api/code/blobs/" + s, raw=data):
                pass
        ans = self._json("POST", "/api/code/trees", {"files": files})
        return {"tree": ans["tree"], "subdir": subdir}

    def task(self, run_id):
        """The Task of a run, a dict (API.md "Runs")."""
        return self._json("GET", "/api/tasks/" + self._id(run_id))

    def notebook(self, command=None, port=8888, timeout=None, poll=1.0, **spec):
        """Queue a notebook (an interactive run whose web app listens on
        ``port`` of its worker's loopback; docs/interactive.md), wait until
        it runs and return ``(id, url)``: the master serves the app at
        ``url`` for its owner only, signed in by the dashboard's cookie.
        Without ``command`` it runs JupyterLab, with a token of its own in
        the URL (jupyter must be on the run's PATH); a command of your own
        must serve under ``$RLSCHED_BASE_URL`` on ``$RLSCHED_PORT``. The
        other keywords are submit's (``gpus=1``, ``timeout_seconds=``...).
        ``timeout`` bounds the wait (TimeoutError, the run stays queued).
        """
        spec = dict(spec, kind="interactive", port=port)
        token = None
        if command is None:
            token = secrets.token_hex(24)
            spec["command"] = ["sh", "-c", 'exec jupyter lab --no-browser --ip=127.0.0.1 --port="$RLSCHED_PORT" '
                               '--ServerApp.base_url="$RLSCHED_BASE_URL" --ServerApp.allow_remote_access=True']
            spec["env"] = dict(spec.get("env") or {}, JUPYTER_TOKEN=token)
            spec.setdefault("name", "notebook")
        else:
            spec["command"] = list(command)
        rid = self.submit(**spec)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            t = self.task(rid)
            if t["status"] == "RUNNING":
                break
            if t["status"] in TERMINAL:
                raise RuntimeError("notebook %s ended %s before it ran: %s" % (rid, t["status"], t.get("error") or ""))
            if deadline is not None and time.monotonic() + poll > deadline:
                raise TimeoutError("notebook %s still %s after %ss" % (rid, t["status"], timeout))
            time.sleep(poll)
        url = "%s/sessions/%s/" % (self.url, rid)
        if token:
            url += "lab?token=" + token
        return rid, url

    def wait(self, run_id, timeout=None, poll=1.0):
        """Wait until the run has finished and return its final Task.

        Raises TimeoutError when ``timeout`` seconds pass first (None: wait
        as long as it takes). A master that cannot be reached for a while
        (restarting, 503) is asked again at the next poll.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        status = "unknown"
        while True:
            try:
                t = self.task(run_id)
                status = t["status"]
                if status in TERMINAL:
                    return t
            except APIError as e:
                if e.code != "unavailable":
                    raise
                status = "unreachable (%s)" % e.message
            if deadline is not None and time.monotonic() + poll > deadline:
                raise TimeoutError("run %s still %s after %ss" % (run_id, status, timeout))
            time.sleep(poll)

    def runs(self, limit=None, page_size=500, params=None, **filters):
        """The runs matching ``filters`` (GET /api/tasks), newest first, as a
        list of Tasks; it follows nextCursor until the last page, or until
        ``limit`` runs.

        Filters are the query parameters of API.md: ``status``, ``user``,
        ``project``, ``tag``, ``name``, ``sweep``, ``created_after`` and
        ``created_before`` (a datetime or an RFC 3339 string), and
        ``params={"lr": 0.001}`` for ``?param.lr=0.001``.
        """
        out = []
        cursor = ""
        if limit is not None and limit <= 0:
            return out
        while True:
            size = page_size if limit is None else min(page_size, limit - len(out))
            q = dict(filters, limit=size, cursor=cursor or None)
            page = self._json("GET", "/api/tasks?" + _query(q, params))
            out.extend(page.get("items") or [])
            cursor = page.get("nextCursor") or ""
            if not cursor or (limit is not None and len(out) >= limit):
                return out if limit is None else out[:limit]

    def cancel(self, run_id):
        """Cancel a run; returns its Task (the cancel is under way)."""
        return self._json("POST", "/api/tasks/%s/cancel" % self._id(run_id))

    def edit(self, run_id, name=None, tags=None, add_tags=None, remove_tags=None, note=None, baseline=None):
        """Change a run's record (PATCH /api/tasks/{id}; its owner or an
        admin, at any status) and return its Task. ``tags`` replaces the
        tags; ``add_tags`` and ``remove_tags`` change them, keeping the
        others; ``note=""`` clears the note; ``baseline`` is True or False.
        Arguments left None stay as they are."""
        body = _body({"name": name, "tags": _strs(tags), "add_tags": _strs(add_tags),
                      "remove_tags": _strs(remove_tags), "note": note, "baseline": baseline})
        return self._json("PATCH", "/api/tasks/%s" % self._id(run_id), body)

    def rerun(self, run_id, **overrides):
        """Submit a new run with the spec of ``run_id``, ``overrides`` (the
        fields of submit) written over it; returns the new run's id."""
        return self._json("POST", "/api/tasks/%s/rerun" % self._id(run_id), _body(self._with_code(overrides)))["id"]

    def metrics(self, run_id, names=None, times=False):
        """The run's metric series: ``{name: [[step, value], ...]}``, all of
        them or those in ``names``; with ``times``, ``[step, value, t]``, t
        the Unix ms the point was logged at (None when not known)."""
        path = "/api/tasks/%s/metrics" % self._id(run_id)
        q = {}
        if names:
            q["names"] = ",".join(names)
        if times:
            q["times"] = "true"
        if q:
            path += "?" + urllib.parse.urlencode(q)
        return self._json("GET", path)["series"]

    def logs(self, run_id, offset=0, limit=None, rank=None):
        """A part of the run's log from byte ``offset``: the answer of API.md
        "Logs", ``{"content": [lines], "offset", "nextOffset", "eof"}``; pass
        ``nextOffset`` as the next call's offset to follow the log.
        ``rank=N`` reads a multi-node group's member N's log (default 0)."""
        q = {"offset": int(offset)}
        if limit is not None:
            q["limit"] = int(limit)
        if rank is not None:
            q["rank"] = int(rank)
        return self._json("GET", "/api/monitor/logs/%s?%s" % (self._id(run_id), urllib.parse.urlencode(q)))

    # -- run outputs ----------------------------------------------------------

    def artifacts(self, run_id, attempt=None):
        """The files the run wrote to its output directory: a list of
        ``{"path", "size", "sha256", "attempt", "modifiedAt"}`` (API.md "Run
        outputs"), the newest version of each path, or those of ``attempt``."""
        path = "/api/tasks/%s/artifacts" % self._id(run_id)
        if attempt is not None:
            path += "?attempt=%d" % int(attempt)
        return self._json("GET", path)["items"]

    def download(self, run_id, path, to, attempt=None):
        """Download artifact ``path`` of the run (its newest version, or that
        of ``attempt``) to the file ``to`` (or into the existing directory
        ``to``, keeping ``path``'s folders) and return where it went. The file
        appears complete or not at all, and only when its bytes hash to the
        sha256 the server names in its ETag (APIError "bad_response"
        otherwise)."""
        target = _artifact_target(path, to)
        url = "/api/tasks/%s/artifacts/%s" % (self._id(run_id), urllib.parse.quote(path, safe="/"))
        if attempt is not None:
            url += "?attempt=%d" % int(attempt)
        folder = os.path.dirname(os.path.abspath(target))
        with self._open("GET", url, accept="*/*") as resp:
            want = _etag_sha256(resp.headers.get("ETag", ""))
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".rlsched-", dir=folder)
            try:
                digest = hashlib.sha256()
                with os.fdopen(fd, "wb") as f:
                    while True:
                        chunk = resp.read(1 << 20)
                        if not chunk:
                            break
                        digest.update(chunk)
                        f.write(chunk)
                if want and digest.hexdigest() != want:
                    raise APIError(resp.status, "bad_response", "%s: the bytes received hash to %s, the server named %s"
                                   % (path, digest.hexdigest()[:12], want[:12]), resp.headers.get("X-Trace-Id", ""))
                os.replace(tmp, target)
            except BaseException:
                os.unlink(tmp)
                raise
        return target

    # -- sweeps ---------------------------------------------------------------

    def sweep(self, **spec):
        """Submit a sweep (POST /api/sweeps) and return the answer
        ``{"id", "runs": [ids]}``.

        ``spec`` holds the fields of API.md "Sweeps and seed groups":
        ``name``, ``project``, ``base={...}`` (the fields of submit; their
        snake_case names become camelCase too), ``grid={"lr": [3e-4,
        1e-3]}``, ``random={"lr": {"dist": "loguniform", "min": 1e-5,
        "max": 1e-2}}`` with ``samples=n``, ``seeds=[...]`` or
        ``seed_count=n``, ``max_parallel=n`` and ``random_seed=n``; a
        search: ``method="tpe"``, ``budget=n``, ``metric``, ``goal``, and
        ``early_stop={"method": "asha", "min_steps": 1000}`` (or
        ``"rungs": [...]``, ``"reduction_factor"``; or ``"median"``), whose
        names become camelCase too.
        """
        if isinstance(spec.get("base"), dict):
            spec = dict(spec, base=self._with_code(spec["base"]))
        return self._json("POST", "/api/sweeps", _sweep_body(spec))

    def sweeps(self, **filters):
        """The sweeps (GET /api/sweeps), newest first: a list of
        ``{"id", "name", "user", "createdAt", "members", "counts"}``;
        filters ``user``, ``limit``."""
        q = _query(filters)
        return self._json("GET", "/api/sweeps" + ("?" + q if q else ""))["items"]

    def sweep_info(self, sweep_id, runs=True):
        """A sweep (GET /api/sweeps/{id}): its ``counts``, the latest run of
        each member in ``runs`` (left out with ``runs=False``) and its seed
        ``groups``, each ``{"params", "runs", "n", "finalReward": {"mean",
        "std", "min", "max"}, "counts"}``, best mean first; and what its
        search found: ``best`` (``{"params", "value", "ci": [lo, hi],
        "runs"}`` or None), ``importance`` (``[{"param", "value"}]``),
        ``stops`` (``[{"run", "error"}]``: the members stopped early and
        why), ``unreported`` (started without a point of the early-stopping
        metric, never stopped for it) and ``noObjective`` (ended without a
        point of the sweep's metric: a metric no member reports)."""
        path = "/api/sweeps/" + self._id(sweep_id)
        return self._json("GET", path + ("" if runs else "?runs=false"))

    def sweep_metrics(self, sweep_id, name="episode_reward"):
        """Each seed group's curve of metric ``name``: a list of ``{"params",
        "runs", "series": [[step, mean, std, n, min, max], ...]}``."""
        path = "/api/sweeps/%s/metrics?%s" % (self._id(sweep_id), urllib.parse.urlencode({"name": name}))
        return self._json("GET", path)["groups"]

    def compare(self, params=None, **query):
        """Compare groups of runs as an RL paper does (GET /api/compare):
        each group's IQM, mean, median and optimality gap with stratified
        bootstrap intervals, and on demand its performance profile, the
        probability of improvement of one group over another and IQM curves.

        The runs: ``sweep=ID`` (each member's latest run), ``ids=[...]``, or
        the filters of runs() (``tag``, ``project``, ``params={"lr": 1e-3}``,
        ...). Then ``by=["lr"]`` (params, "param." optional; default every
        param but the seed), ``task="env"`` (a param; ``"tag.env"``: the tag
        env:VALUE), ``metric``, ``window``,
        ``stat=["iqm", "mean"]``, ``reps``, ``ci``, ``seed``, ``gamma``,
        ``normalize="minmax"`` with ``min`` and ``max`` (numbers, or dicts by
        task) (or "baseline" with
        ``baseline=GROUP``), ``profile=[tau, ...]``, ``improve=("A", "B")``
        (or "A:B"; "all" for the matrix of every pair, in "improvements")
        and ``curve=POINTS``, as API.md names them. Returns the
        answer: ``{"groups": [{"key", "name", "n", "stats": {"iqm": {"value",
        "ci": [lo, hi]}}, "profile": [[tau, fraction, lo, hi]]}],
        "improvement": {"a", "b", "value", "ci"}, ...}``.
        """
        q = dict(query)
        for k in ("by", "task"):
            v = q.get(k)
            if v is not None:
                names = [v] if isinstance(v, str) else list(v)
                q[k] = ",".join(n if n.startswith(("param.", "tag.")) else "param." + n
                                for part in names for n in part.split(","))
        if isinstance(q.get("improve"), (list, tuple)):
            q["improve"] = ":".join(str(x) for x in q["improve"])
        for k in ("min", "max"):
            if isinstance(q.get(k), dict):  # per task: {"cartpole": 0, "pendulum": -1600}
                q[k] = ",".join("%s=%s" % (t, _query_value(v)) for t, v in q[k].items())
        return self._json("GET", "/api/compare?" + _query(q, params))

    def retry_sweep(self, sweep_id):
        """Rerun every member whose latest run ended FAILED, CANCELLED or
        TIMEOUT; returns the new runs' ids (none on a second call)."""
        return self._json("POST", "/api/sweeps/%s/retry" % self._id(sweep_id))["runs"]

    # -- pipelines -------------------------------------------------------------

    def pipeline(self, spec=None, path=None, **fields):
        """Submit a pipeline (POST /api/pipelines) and return the answer
        ``{"id", "runs": {step: run id}}``.

        ``spec`` is ``{"name", "steps": [...]}`` (or ``path`` a JSON file of
        it, or ``name=`` and ``steps=`` as keywords); each step is a submission
        as ``submit`` takes it (snake_case names become camelCase) with a
        unique ``name`` and ``after=[{"step": "train"}]`` (a bare string is a
        step's name), ``inputs_from=["train"]``.
        """
        if path is not None:
            with open(path) as f:
                spec = json.load(f)
        spec = dict(spec or {}, **fields)
        steps = []
        for st in spec.get("steps") or []:
            st = dict(st)
            if st.get("after") is not None:
                after = st["after"]
                if isinstance(after, (str, dict)):
                    after = [after]
                st["after"] = [{"step": a} if isinstance(a, str) else dict(a) for a in after]
            steps.append(_run_body(st))
        return self._json("POST", "/api/pipelines", {"name": spec.get("name", ""), "steps": steps})

    def pipeline_info(self, pipeline_id):
        """A pipeline (GET /api/pipelines/{id}): ``steps`` with each one's
        ``name``, ``run``, ``status``, ``after`` (step names) and ``depth``."""
        return self._json("GET", "/api/pipelines/" + self._id(pipeline_id))

    def retry_pipeline(self, pipeline_id):
        """Rerun the steps that ended without succeeding and the steps after
        them (POST /api/pipelines/{id}/retry); returns ``{"id", "runs": {step:
        new run id}}``."""
        return self._json("POST", "/api/pipelines/" + self._id(pipeline_id) + "/retry")

    def wait_pipeline(self, pipeline_id, timeout=None, poll=1.0):
        """Wait until every step's run ended; return the pipeline."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            p = self.pipeline_info(pipeline_id)
            if all(st["status"] in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT") for st in p["steps"]):
                return p
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("pipeline %s still going after %ss" % (pipeline_id, timeout))
            time.sleep(poll)

    def cancel_sweep(self, sweep_id):
        """Cancel every member still queued or running; returns their ids."""
        return self._json("POST", "/api/sweeps/%s/cancel" % self._id(sweep_id))["runs"]

    def wait_sweep(self, sweep_id, timeout=None, poll=2.0):
        """Wait until no member of the sweep is queued or running and return
        the sweep (without its runs; see sweep_info). Raises TimeoutError
        when ``timeout`` seconds pass first; an unreachable master is asked
        again at the next poll."""
        deadline = None if timeout is None else time.monotonic() + timeout
        left = "unknown"
        while True:
            try:
                sw = self.sweep_info(sweep_id, runs=False)
                c = sw["counts"]
                active = sum(c.get(s, 0) for s in ("QUEUED", "DISPATCHED", "RUNNING", "LOST"))
                if active == 0:
                    return sw
                left = "%d members queued or running" % active
            except APIError as e:
                if e.code != "unavailable":
                    raise
                left = "unreachable (%s)" % e.message
            if deadline is not None and time.monotonic() + poll > deadline:
                raise TimeoutError("sweep %s: %s after %ss" % (sweep_id, left, timeout))
            time.sleep(poll)

    # -- scheduling policy ----------------------------------------------------

    def queue(self, limit=None):
        """The QUEUED runs in the order the scheduler will serve them (GET
        /api/queue): a list of ``{"id", "name", "user", "gpus", "priority",
        "createdAt", "position", "pendingCode", "pendingReason"}`` (API.md
        "Scheduling policy"); runs being placed come first, at position 0. At
        most ``limit`` runs (the server's default: 500)."""
        q = _query({"limit": limit})
        return self._json("GET", "/api/queue" + ("?" + q if q else ""))["items"]

    def usage(self):
        """Every user's standing (GET /api/users/usage), lowest usage first: a
        list of ``{"user", "usage", "runningGpus", "runningRuns", "quota":
        {"gpus", "runs"}, "usageGpuHours"}``; usage is in GPU-seconds, decayed
        (``usageGpuHours`` the same in GPU-hours, as ``rlsched quota ls``
        shows it), and the quota is the one that applies (None: no cap)."""
        items = self._json("GET", "/api/users/usage")["items"]
        for it in items:
            if isinstance(it.get("usage"), (int, float)):
                it["usageGpuHours"] = it["usage"] / 3600.0
        return items

    def quotas(self):
        """Every user's own quota (GET /api/admin/quotas; admins only): a list
        of ``{"user", "gpus", "runs"}``, None where none is set."""
        return self._json("GET", "/api/admin/quotas")["items"]

    def set_quota(self, username, gpus=None, runs=None):
        """Replace a user's quota (PUT /api/admin/quotas/{username}; admins
        only): at most ``gpus`` active GPUs and ``runs`` active runs, None for
        no cap, so a cap left out is lifted. Returns ``{"user", "gpus",
        "runs"}``."""
        return self._json("PUT", "/api/admin/quotas/" + self._id(username), {"gpus": gpus, "runs": runs})

    def notifications(self):
        """Your webhook settings (GET /api/auth/me/notifications):
        ``{"webhook", "on"}``, webhook "" when off."""
        return self._json("GET", "/api/auth/me/notifications")

    def set_notifications(self, webhook, on=None):
        """Set your webhook (PUT /api/auth/me/notifications; "" turns it
        off) and the events it hears of (run statuses or warning codes;
        None: every end). The master checks the URL as it will when it
        sends: a host of its own network is a 400 unless NOTIFY_ALLOW_HOSTS
        names it."""
        return self._json("PUT", "/api/auth/me/notifications", {"webhook": webhook, "on": list(on or [])})

    def test_notification(self):
        """Send one test message to your webhook now (POST
        /api/auth/me/notifications/test): ``{"sent", "webhook", "error"}``;
        409 "conflict" when no webhook is set."""
        return self._json("POST", "/api/auth/me/notifications/test")

    def change_password(self, current, new):
        """Change your own password (PUT /api/auth/me/password); every
        token of yours is revoked, this client's too: sign in again with
        the new one. 403 "forbidden" when current is wrong."""
        return self._json("PUT", "/api/auth/me/password", {"current": current, "new": new})

    def new_token(self):
        """A new token of yours for another script (POST
        /api/auth/me/token): ``{"token", "expiresAt"}``."""
        return self._json("POST", "/api/auth/me/token")

    def set_priority(self, run_id, priority):
        """Give a QUEUED run a new priority (POST /api/tasks/{id}/priority;
        admins only) and return its Task; 409 "conflict" once it has left the
        queue."""
        return self._json("POST", "/api/tasks/%s/priority" % self._id(run_id), {"priority": int(priority)})
