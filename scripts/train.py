#!/usr/bin/env python3
"""Dependency-free reinforcement-learning run for rlsched: CartPole in pure Python.

    python3 -u train.py --algo PPO --episodes 200 --seed 0

The environment is the classic cart-pole (Barto, Sutton & Anderson 1983, as in Gym's
CartPole-v1): Euler integration every 0.02 s, reward 1 per step, the episode ends when the
pole leans past 12 degrees, the cart leaves +-2.4, or after 500 steps.

The policy is a linear softmax over the two actions (4 state inputs plus a bias -> 2
logits). Algorithms:

  REINFORCE  Monte-Carlo policy gradient with a baseline: a linear value function of the
             state (fitted by least squares on recent episodes); advantages normalised.
  PPO        clipped surrogate objective (eps 0.2), several epochs of minibatch updates
             per batch of episodes, GAE advantages on a linear value baseline.

Both use Adam. Seeded runs are deterministic (one random.Random for the environment and
one for the policy).

Output: a progress line every 10 episodes, one ``RLSCHED_METRIC {"step": episode,
"episode_reward": r}`` line per episode, and ``FINAL_REWARD:x`` at the end (x: mean reward
of the last 10 episodes).

Checkpoints: checkpoint.json in $RLSCHED_OUTPUT_DIR (or ./outputs) holds everything needed
to continue: the episode, the weights, the value fit, Adam's state, both random generators
and the last rewards. It is written at least every 10 episodes, at the end, and on SIGTERM
(or SIGINT: the run then exits with 128 + the signal), each time whole (a temporary file,
then os.replace). It always describes a point between two updates (the end of an episode for
REINFORCE, of a batch of 4 for PPO), so a SIGTERM keeps the last such point and the episodes
after it are played again. With RLSCHED_RESUME=1 (set by rlsched on a retried or resumed
run) and a checkpoint there, training continues from it: ``resumed from episode K`` is
printed, metric steps go on at K+1, and the rewards are the ones an uninterrupted run of the
same seed would have had. A checkpoint that cannot be read (damaged, another format, another
algorithm) is reported on stderr and the run starts from episode 1.

Unknown ``--key value`` options (the scheduler appends every parameter) are ignored with a
note on stderr.
"""

import argparse
import json
import math
import os
import random
import signal
import sys
import tempfile
import time

try:  # the worker puts the scripts directory on PYTHONPATH
    import rlsched as _rlsched

    if not all(hasattr(_rlsched, n) for n in ("metric", "final_reward", "output_dir")):
        raise ImportError("rlsched lacks the helpers")
except ImportError:  # standalone copy: inline fallback
    _rlsched = None


def _metric(step, **values):
    if _rlsched is not None:
        _rlsched.metric(step, **values)
        return
    record = {"step": step}
    record.update(values)
    print("RLSCHED_METRIC " + json.dumps(record), flush=True)


def _final_reward(x):
    if _rlsched is not None:
        _rlsched.final_reward(x)
        return
    print("FINAL_REWARD:" + str(x), flush=True)


def _output_dir():
    if _rlsched is not None:
        return _rlsched.output_dir()
    path = os.environ.get("RLSCHED_OUTPUT_DIR") or "./outputs"
    os.makedirs(path, exist_ok=True)
    return path


ALGOS = ("REINFORCE", "PPO")
# Defaults tuned so that 200 episodes learn for seeds 0..4 in a few seconds.
DEFAULT_LR = {"REINFORCE": 0.03, "PPO": 0.01}
CHECKPOINT_EVERY = 10
CHECKPOINT_NAME = "checkpoint.json"
CHECKPOINT_FORMAT = "rlsched-cartpole-linear-v2"
RECENT = 10  # rewards kept in a checkpoint: those FINAL_REWARD and the progress line average
GAMMA = 0.99

# ---------------------------------------------------------------------------- CartPole

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_CART + MASS_POLE
HALF_LENGTH = 0.5  # half the pole's length
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_LIMIT = 12 * 2 * math.pi / 360
X_LIMIT = 2.4
MAX_STEPS = 500

# Features: the state scaled to roughly [-1, 1], plus a bias.
SCALE = (1 / 2.4, 1 / 3.0, 1 / THETA_LIMIT, 1 / 3.0)
NFEAT = 5


def cartpole_reset(rng):
    return [rng.uniform(-0.05, 0.05) for _ in range(4)]


def cartpole_step(s, action):
    """Advance state s (list of x, x_dot, theta, theta_dot) in place; return done."""
    x, x_dot, theta, theta_dot = s
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    cos_t = math.cos(theta)
    sin_t = math.sin(theta)
    temp = (force + POLE_MASS_LENGTH * theta_dot * theta_dot * sin_t) / TOTAL_MASS
    theta_acc = (GRAVITY * sin_t - cos_t * temp) / (
        HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * cos_t * cos_t / TOTAL_MASS)
    )
    x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos_t / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * x_acc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * theta_acc
    s[0] = x
    s[1] = x_dot
    s[2] = theta
    s[3] = theta_dot
    return x < -X_LIMIT or x > X_LIMIT or theta < -THETA_LIMIT or theta > THETA_LIMIT


def features(s):
    return (s[0] * SCALE[0], s[1] * SCALE[1], s[2] * SCALE[2], s[3] * SCALE[3], 1.0)


# ---------------------------------------------------------------------------- model


class Stop(Exception):
    """Raised at a safe point once SIGTERM (or SIGINT) has arrived."""


class Run:
    def __init__(self, algo, episodes, lr, seed):
        self.algo = algo
        self.episodes = episodes
        self.lr = lr
        self.seed = seed
        self.env_rng = random.Random(seed * 2 + 1)
        self.act_rng = random.Random(seed * 2 + 2)
        # Linear softmax policy: logits[a] = W[a] . phi(s); starts uniform.
        self.W = [[0.0] * NFEAT, [0.0] * NFEAT]
        # Linear value baseline v . phi(s), fitted by ridge least squares.
        self.v = [0.0] * NFEAT
        self.vA = [[0.0] * NFEAT for _ in range(NFEAT)]  # upper triangle used
        self.vb = [0.0] * NFEAT
        self.vn = 0.0
        # Adam state for W (flattened 2 x NFEAT).
        self.m = [0.0] * (2 * NFEAT)
        self.u = [0.0] * (2 * NFEAT)
        self.t = 0
        self.episode = 0  # completed episodes
        self.rewards = []  # of this process's episodes and the resumed checkpoint's recent ones
        self.stop_signal = 0
        self.started = time.monotonic()
        self.start_episode = 0  # the episode resumed from
        # The last state between two updates (snapshot()), what a checkpoint holds.
        self.snap = self.snapshot()
        self.saved_episode = 0

    # -- signals

    def on_signal(self, signum, _frame):
        self.stop_signal = signum

    def check(self):
        if self.stop_signal:
            raise Stop()

    # -- policy

    def prob1(self, phi):
        """Probability of action 1 under the current policy."""
        w0, w1 = self.W
        z = (
            (w1[0] - w0[0]) * phi[0]
            + (w1[1] - w0[1]) * phi[1]
            + (w1[2] - w0[2]) * phi[2]
            + (w1[3] - w0[3]) * phi[3]
            + (w1[4] - w0[4]) * phi[4]
        )
        if z >= 0:
            return 1.0 / (1.0 + math.exp(-z))
        e = math.exp(z)
        return e / (1.0 + e)

    def adam_ascent(self, grad):
        """One Adam step that increases the objective whose gradient w.r.t. the
        difference logit is grad (length NFEAT): d/dW1 = grad, d/dW0 = -grad."""
        b1, b2, eps = 0.9, 0.999, 1e-8
        self.t += 1
        c1 = 1 - b1 ** self.t
        c2 = 1 - b2 ** self.t
        m, u = self.m, self.u
        for k in range(2 * NFEAT):
            g = grad[k - NFEAT] if k >= NFEAT else -grad[k]
            m[k] = b1 * m[k] + (1 - b1) * g
            u[k] = b2 * u[k] + (1 - b2) * g * g
            step = self.lr * (m[k] / c1) / (math.sqrt(u[k] / c2) + eps)
            if k >= NFEAT:
                self.W[1][k - NFEAT] += step
            else:
                self.W[0][k] += step

    def value(self, phi):
        v = self.v
        return v[0] * phi[0] + v[1] * phi[1] + v[2] * phi[2] + v[3] * phi[3] + v[4] * phi[4]

    def fit_value(self, phis, targets, keep=0.0, ridge=1e-3):
        """Least-squares fit of the linear value baseline (ridge normal equations).

        The normal equations' sums are kept between calls, multiplied by keep (0: fit on
        this data only), so earlier data counts with geometrically decaying weight."""
        n = NFEAT
        A, b = self.vA, self.vb
        for i in range(n):
            b[i] *= keep
            row = A[i]
            for j in range(n):
                row[j] *= keep
        self.vn = self.vn * keep + len(phis)
        for phi, y in zip(phis, targets):
            for i in range(n):
                pi = phi[i]
                b[i] += pi * y
                row = A[i]
                for j in range(i, n):
                    row[j] += pi * phi[j]
        M = [list(row) for row in A]
        for i in range(n):
            M[i][i] += ridge * self.vn + 1e-9
            for j in range(i):
                M[i][j] = M[j][i]
        sol = solve(M, b)
        if sol is not None:
            self.v = sol

    # -- acting

    def run_episode(self):
        """Play one episode; return (phis, actions, probs of the taken actions, reward)."""
        s = cartpole_reset(self.env_rng)
        phis, actions, probs = [], [], []
        rnd = self.act_rng.random
        steps = 0
        while True:
            if self.stop_signal:
                raise Stop()
            phi = features(s)
            p1 = self.prob1(phi)
            a = 1 if rnd() < p1 else 0
            phis.append(phi)
            actions.append(a)
            probs.append(p1 if a == 1 else 1.0 - p1)
            steps += 1
            if cartpole_step(s, a) or steps >= MAX_STEPS:
                break
        return phis, actions, probs, float(steps)

    def finish_episode(self, reward):
        self.episode += 1
        self.rewards.append(reward)
        _metric(self.episode, episode_reward=reward)
        if self.episode % 10 == 0 or self.episode == self.episodes:
            last = self.rewards[-10:]
            print(
                "episode %d/%d  reward %.1f  mean(last %d) %.1f  elapsed %.1fs"
                % (
                    self.episode,
                    self.episodes,
                    reward,
                    len(last),
                    sum(last) / len(last),
                    time.monotonic() - self.started,
                ),
                flush=True,
            )
    # -- checkpoints

    def snapshot(self):
        """The whole training state now, as checkpoint.json holds it (a JSON object)."""
        last = self.rewards[-RECENT:]
        return {
            "format": CHECKPOINT_FORMAT,
            "algo": self.algo,
            "seed": self.seed,
            "lr": self.lr,
            "episode": self.episode,
            "episodes": self.episodes,
            "mean_reward_last10": (sum(last) / len(last)) if last else None,
            "weights": {"policy": [list(self.W[0]), list(self.W[1])], "value": list(self.v)},
            "features": "x/2.4, x_dot/3, theta/theta_limit, theta_dot/3, 1",
            "state": {
                "value_fit": {"A": [list(row) for row in self.vA], "b": list(self.vb), "n": self.vn},
                "adam": {"m": list(self.m), "u": list(self.u), "t": self.t},
                "rng": {"env": _rng_state(self.env_rng), "act": _rng_state(self.act_rng)},
                "recent_rewards": list(last),
            },
        }

    def between_updates(self, span):
        """Record a consistent point (the next one is ``span`` episodes away) and write the
        checkpoint when waiting for the next point would leave more than CHECKPOINT_EVERY
        episodes since the last one written."""
        self.snap = self.snapshot()
        if self.episode - self.saved_episode + span > CHECKPOINT_EVERY:
            self.save()

    def save(self):
        """Write the last consistent point to checkpoint.json, whole or not at all. A
        checkpoint that cannot be written is reported on stderr; training goes on."""
        out = _output_dir()
        path = os.path.join(out, CHECKPOINT_NAME)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix="." + CHECKPOINT_NAME + ".", suffix=".tmp", dir=out)
            with os.fdopen(fd, "w") as f:
                json.dump(self.snap, f)
                f.write("\n")
            os.replace(tmp, path)
        except OSError as e:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            print("train.py: cannot write the checkpoint %s: %s" % (path, e), file=sys.stderr, flush=True)
            return path
        self.saved_episode = self.snap["episode"]
        return path

    def restore(self, data):
        """Continue from checkpoint ``data`` (a parsed checkpoint.json); raise ValueError,
        saying why, when it cannot be this run's."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("format %r, not %s" % (data.get("format"), CHECKPOINT_FORMAT))
        if data.get("algo") != self.algo:
            raise ValueError("it is a %s run's, this run is %s" % (data.get("algo"), self.algo))
        episode = data.get("episode")
        if not isinstance(episode, int) or isinstance(episode, bool) or episode < 0:
            raise ValueError("episode %r is not a count" % (episode,))
        try:
            w, st = data["weights"], data["state"]
            W = [_floats(w["policy"][0], NFEAT), _floats(w["policy"][1], NFEAT)]
            if len(w["policy"]) != 2:
                raise ValueError("the policy has %d rows, not 2" % len(w["policy"]))
            v = _floats(w["value"], NFEAT)
            fit = st["value_fit"]
            vA = [_floats(row, NFEAT) for row in fit["A"]]
            if len(vA) != NFEAT:
                raise ValueError("the value fit has %d rows, not %d" % (len(vA), NFEAT))
            vb = _floats(fit["b"], NFEAT)
            vn = _floats([fit["n"]], 1)[0]
            adam = st["adam"]
            m, u = _floats(adam["m"], 2 * NFEAT), _floats(adam["u"], 2 * NFEAT)
            t = adam["t"]
            if not isinstance(t, int) or t < 0:
                raise ValueError("Adam's step %r is not a count" % (t,))
            env_rng, act_rng = random.Random(), random.Random()
            env_rng.setstate(_rng_from(st["rng"]["env"]))
            act_rng.setstate(_rng_from(st["rng"]["act"]))
            recent = _floats(st["recent_rewards"], None)[-RECENT:]
        except (KeyError, IndexError, TypeError) as e:
            raise ValueError("incomplete or malformed (%s: %s)" % (type(e).__name__, e)) from None
        self.W, self.v, self.vA, self.vb, self.vn = W, v, vA, vb, vn
        self.m, self.u, self.t = m, u, t
        self.env_rng, self.act_rng = env_rng, act_rng
        self.episode = self.start_episode = self.saved_episode = episode
        self.rewards = recent
        self.snap = self.snapshot()

    # -- algorithms

    def reinforce(self):
        """REINFORCE with a linear value baseline, one update per episode."""
        while self.episode < self.episodes:
            phis, actions, probs, reward = self.run_episode()
            n = len(phis)
            returns = [0.0] * n
            g = 0.0
            for i in range(n - 1, -1, -1):
                g = 1.0 + GAMMA * g
                returns[i] = g
            adv = [returns[i] - self.value(phis[i]) for i in range(n)]
            adv = normalise(adv)
            grad = [0.0] * NFEAT
            for i in range(n):
                phi = phis[i]
                # d log pi(a|s) / d z, z the difference logit: a - p1
                p1 = probs[i] if actions[i] == 1 else 1.0 - probs[i]
                c = adv[i] * (actions[i] - p1) / n
                for k in range(NFEAT):
                    grad[k] += c * phi[k]
            self.check()
            self.adam_ascent(grad)
            self.fit_value(phis, returns, keep=0.8)
            self.finish_episode(reward)
            self.between_updates(1)

    def ppo(self, batch_episodes=4, epochs=4, minibatch=128, clip=0.2, lam=0.95):
        """PPO (clipped surrogate) with GAE on a linear value baseline."""
        while self.episode < self.episodes:
            b_phi, b_act, b_oldp, b_adv, b_ret = [], [], [], [], []
            for _ in range(min(batch_episodes, self.episodes - self.episode)):
                phis, actions, probs, reward = self.run_episode()
                n = len(phis)
                vals = [self.value(phi) for phi in phis]
                truncated = n >= MAX_STEPS
                gae = 0.0
                advs = [0.0] * n
                for i in range(n - 1, -1, -1):
                    if i == n - 1:
                        nxt = vals[i] if truncated else 0.0  # bootstrap a time-limit cut
                    else:
                        nxt = vals[i + 1]
                    delta = 1.0 + GAMMA * nxt - vals[i]
                    gae = delta + GAMMA * lam * gae
                    advs[i] = gae
                b_phi.extend(phis)
                b_act.extend(actions)
                b_oldp.extend(probs)
                b_adv.extend(advs)
                b_ret.extend(advs[i] + vals[i] for i in range(n))
                self.finish_episode(reward)
            b_adv = normalise(b_adv)
            total = len(b_phi)
            order = list(range(total))
            for _ in range(epochs):
                self.act_rng.shuffle(order)
                for start in range(0, total, minibatch):
                    self.check()
                    idx = order[start : start + minibatch]
                    grad = [0.0] * NFEAT
                    for i in idx:
                        phi = b_phi[i]
                        p1 = self.prob1(phi)
                        a = b_act[i]
                        p = p1 if a == 1 else 1.0 - p1
                        ratio = p / b_oldp[i]
                        A = b_adv[i]
                        if (A > 0 and ratio > 1 + clip) or (A < 0 and ratio < 1 - clip):
                            continue  # clipped: no gradient
                        c = A * ratio * (a - p1)
                        for k in range(NFEAT):
                            grad[k] += c * phi[k]
                    m = len(idx)
                    self.adam_ascent([g / m for g in grad])
            self.fit_value(b_phi, b_ret)
            self.between_updates(batch_episodes)


def _rng_state(rng):
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from(state):
    version, internal, gauss = state
    if not isinstance(internal, list) or not all(isinstance(x, int) for x in internal):
        raise ValueError("a random generator's state is malformed")
    return (version, tuple(internal), gauss)


def _floats(xs, n):
    """xs as a list of finite floats, of length n (any length when n is None)."""
    if not isinstance(xs, list) or (n is not None and len(xs) != n):
        raise ValueError("a list of %s numbers is malformed" % (n if n is not None else "some"))
    out = []
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValueError("%r is not a finite number" % (x,))
        out.append(float(x))
    return out


def normalise(xs):
    n = len(xs)
    if n == 0:
        return xs
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / n
    std = math.sqrt(var)
    if std < 1e-8:
        return [x - mean for x in xs]
    return [(x - mean) / std for x in xs]


def solve(A, b):
    """Solve A x = b (small dense system) by Gaussian elimination with partial pivoting."""
    n = len(b)
    M = [list(A[i]) + [b[i]] for i in range(n)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(M[r][col]))
        if abs(M[piv][col]) < 1e-12:
            return None
        M[col], M[piv] = M[piv], M[col]
        for r in range(col + 1, n):
            f = M[r][col] / M[col][col]
            if f:
                for c in range(col, n + 1):
                    M[r][c] -= f * M[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (M[r][n] - sum(M[r][c] * x[c] for c in range(r + 1, n))) / M[r][r]
    return x


# ---------------------------------------------------------------------------- main


def _int(text):
    """An integer; an integral float such as "200.0" (JSON numbers) is accepted too."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value.is_integer():
        raise argparse.ArgumentTypeError("invalid integer: %r" % text)
    return int(value)


def parse(argv):
    parser = argparse.ArgumentParser(
        description="Train a linear softmax policy on CartPole (pure Python).",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--algo",
        "--algorithm",
        dest="algo",
        default="REINFORCE",
        help="REINFORCE or PPO (case-insensitive; default REINFORCE)",
    )
    parser.add_argument("--episodes", type=_int, default=200, help="episodes to train (>= 1; default 200)")
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="Adam learning rate (default %s)" % ", ".join("%s %g" % kv for kv in DEFAULT_LR.items()),
    )
    parser.add_argument("--seed", type=_int, default=0, help="random seed (default 0)")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print("train.py: ignoring unknown arguments: %s" % " ".join(unknown), file=sys.stderr, flush=True)
    algo = str(args.algo).strip().upper()
    if algo not in ALGOS:
        parser.exit(2, "train.py: error: unknown algorithm %r; valid: %s\n" % (args.algo, ", ".join(ALGOS)))
    args.algo = algo
    if args.episodes < 1:
        parser.exit(2, "train.py: error: --episodes must be >= 1, got %d\n" % args.episodes)
    if args.lr is None:
        args.lr = DEFAULT_LR[algo]
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.exit(2, "train.py: error: --lr must be a positive number, got %r\n" % args.lr)
    return args


def resume(run):
    """With RLSCHED_RESUME=1, continue ``run`` from the checkpoint in the output directory;
    without one, or from one that cannot be read, say so and start afresh."""
    if os.environ.get("RLSCHED_RESUME") != "1":
        return
    path = os.path.join(_output_dir(), CHECKPOINT_NAME)
    try:
        with open(path) as f:
            data = json.load(f)
        run.restore(data)
    except FileNotFoundError:
        print("train.py: RLSCHED_RESUME=1 but no %s yet; starting from episode 1" % path, file=sys.stderr, flush=True)
        return
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        print(
            "train.py: cannot resume from %s: %s; starting from episode 1" % (path, e),
            file=sys.stderr,
            flush=True,
        )
        return
    print("resumed from episode %d" % run.episode, flush=True)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    run = Run(args.algo, args.episodes, args.lr, args.seed)
    signal.signal(signal.SIGTERM, run.on_signal)
    signal.signal(signal.SIGINT, run.on_signal)
    print(
        "train.py: CartPole, %s, episodes %d, lr %g, seed %d, output %s"
        % (args.algo, args.episodes, args.lr, args.seed, _output_dir()),
        flush=True,
    )
    resume(run)
    try:
        if args.algo == "PPO":
            run.ppo()
        else:
            run.reinforce()
    except Stop:
        path = run.save()
        name = "SIGTERM" if run.stop_signal == signal.SIGTERM else "SIGINT"
        print(
            "train.py: received %s after %d episodes; checkpoint saved to %s (episode %d)"
            % (name, run.episode, path, run.saved_episode),
            flush=True,
        )
        return 128 + run.stop_signal
    run.snap = run.snapshot()
    path = run.save()
    last = run.rewards[-RECENT:]
    final = sum(last) / len(last) if last else 0.0
    print(
        "train.py: done at episode %d (%d in %.1fs); checkpoint %s"
        % (run.episode, run.episode - run.start_episode, time.monotonic() - run.started, path),
        flush=True,
    )
    _final_reward(round(final, 4))
    return 0


if __name__ == "__main__":
    sys.exit(main())
