"""The textbook estimators in numpy, for stats' cross-check (numpy_test.go).

Reads cases as JSON on stdin (scores as strings, so NaN and Inf travel),
drops the scores that are not finite as the Go side does, and writes each
case's point estimates and its bootstrap intervals (numpy's own random
numbers: the intervals agree within Monte-Carlo error only).
"""
import json
import sys

import numpy as np


def trim_mean(x, p=0.25):
    # scipy.stats.trim_mean(x, 0.25): int(p * n) cut from each end.
    x = np.sort(np.asarray(x, dtype=float), axis=-1)
    n = x.shape[-1]
    k = int(p * n)
    return x[..., k:n - k].mean(axis=-1)


def estimators(gamma):
    # Each takes a list of arrays, one per task, of shape (..., runs).
    return {
        "iqm": lambda ts: trim_mean(np.concatenate(ts, axis=-1)),
        "mean": lambda ts: np.mean([t.mean(axis=-1) for t in ts], axis=0),
        "median": lambda ts: np.median([t.mean(axis=-1) for t in ts], axis=0),
        "gap": lambda ts: gamma - np.minimum(np.concatenate(ts, axis=-1), gamma).mean(axis=-1),
    }


def profile(ts, tau):
    return (np.concatenate(ts, axis=-1) > tau).mean(axis=-1)


def poi(xs, ys):
    ps = [((x[..., :, None] > y[..., None, :]) + 0.5 * (x[..., :, None] == y[..., None, :])).mean(axis=(-2, -1))
          for x, y in zip(xs, ys) if x.shape[-1] and y.shape[-1]]
    return np.mean(ps, axis=0)


def resample(ts, reps, rng):
    return [t[rng.integers(0, t.shape[-1], size=(reps, t.shape[-1]))] for t in ts]


def interval(est, ci):
    # The interval, and for each end the band of percentiles around it
    # that the Go bootstrap's end (as many reps, other random numbers) may
    # fall in: the Monte-Carlo error, in probability, so that it holds for
    # the lumpy distributions of a bootstrap of few runs as well. Five
    # standard errors of the difference of two such percentiles.
    q = np.array([(1 - ci) / 2, (1 + ci) / 2])
    d = 5 * np.sqrt(2 * q * (1 - q) / len(est))
    lo, hi, lo_a, lo_b, hi_a, hi_b = np.percentile(
        est, 100 * np.concatenate([q, [max(q[0] - d[0], 0), q[0] + d[0], q[1] - d[1], min(q[1] + d[1], 1)]]))
    return {"ci": [float(lo), float(hi)], "band": [[float(lo_a), float(lo_b)], [float(hi_a), float(hi_b)]]}


def finite(ts):
    return [t[np.isfinite(t)] for t in ts]


def case(c):
    rng = np.random.default_rng(c["seed"])
    reps, ci, gamma = c["reps"], c["ci"], c["gamma"]
    groups, skipped = [], []
    for g in c["groups"]:
        ts = [np.array([float(s) for s in t]) for t in g]
        kept = finite(ts)
        skipped.append(int(sum(len(t) - len(k) for t, k in zip(ts, kept))))
        groups.append([k for k in kept if len(k)])
    out = {"skipped": skipped, "groups": []}
    for ts in groups:
        bs = resample(ts, reps, rng)
        g = {"stats": {}, "profile": []}
        for name, f in estimators(gamma).items():
            g["stats"][name] = dict(value=float(f(ts)), **interval(f(bs), ci))
        for tau in c["taus"]:
            g["profile"].append(dict(value=float(profile(ts, tau)), **interval(profile(bs, tau), ci)))
        out["groups"].append(g)
    out["improve"] = []
    for a, b in c["improve"]:
        xs, ys = finite([np.array([float(s) for s in t]) for t in c["groups"][a]]), \
            finite([np.array([float(s) for s in t]) for t in c["groups"][b]])
        est = poi(resample(xs, reps, rng), resample(ys, reps, rng))
        out["improve"].append(dict(value=float(poi(xs, ys)), **interval(est, ci)))
    out["curves"] = []
    for g in c.get("curves", []):
        # g: tasks of series of [step, value]; the grid is given.
        grid = np.array(c["grid"])
        ts = []
        for t in g:
            vals = []
            for s in t:
                s = np.array(s, dtype=float).reshape(-1, 2)
                s = s[np.isfinite(s[:, 1])]
                i = np.searchsorted(s[:, 0], grid, side="right") - 1
                vals.append(s[i, 1])
            ts.append(np.array(vals).T)  # (grid, runs)
        point = trim_mean(np.concatenate(ts, axis=-1))
        bs = [t[:, rng.integers(0, t.shape[-1], size=(reps, t.shape[-1]))] for t in ts]  # (grid, reps, runs)
        est = trim_mean(np.concatenate(bs, axis=-1))  # (grid, reps)
        out["curves"].append([dict(value=float(point[f]), **interval(est[f], ci)) for f in range(len(grid))])
    return out


json.dump([case(c) for c in json.load(sys.stdin)], sys.stdout)
