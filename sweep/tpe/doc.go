// Package tpe proposes a sweep's next params with the Tree-structured Parzen
// Estimator (Bergstra, Bardenet, Bengio, Kégl, "Algorithms for
// Hyper-Parameter Optimization", NeurIPS 2011), with Optuna's defaults for
// the parts the paper leaves open: 10 random startup trials, the best
// min(⌈n/10⌉, 25) trials as the good ones, older trials weighted down past
// the 25 newest, a prior kernel of weight 1, the "magic clip" of the
// bandwidths and 24 candidates per param, each param chosen on its own
// (univariate) by the largest l(x)/g(x).
//
// A Space is the sweep's random params (uniform, loguniform, int, choice)
// and, as categorical params, its grid axes; a Trial is one proposal's
// params and objective, finished, stopped early (ranked below the finished,
// as Optuna ranks pruned trials) or still running (ranked last, Optuna's
// constant liar, so parallel proposals spread out). Suggest is a pure
// function of them.
//
// It never does I/O, never reads a clock and never uses global randomness:
// every random draw comes from the *rand.Rand the caller passes, so the same
// space, trials and seed always give the same suggestion.
package tpe
