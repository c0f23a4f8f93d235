// Package importance says how much each param of a sweep mattered to its
// objective (API.md "Sweep search and early stopping": importance): the
// permutation importance of Breiman's random forests ("Random Forests",
// Machine Learning 45, 2001), over a small forest of regression trees
// grown here, for the params of a sweep's search space (sweep/tpe's Space,
// its categoricals split one choice against the rest). For each tree, the rise in its out-of-bag squared error when
// one param's values are shuffled among the out-of-bag trials is that
// param's share; shares are averaged over the trees, negatives clipped to 0
// and normalised to sum to 1.
//
// It is written here rather than taken from a library: the Go machine
// learning libraries with random forests (golearn) are unmaintained since
// 2022, pull in large dependencies and give no permutation or fANOVA
// importance; the forest needed is a few hundred lines.
//
// It never does I/O, never reads a clock and never uses global randomness:
// every draw comes from the *rand.Rand the caller passes.
package importance
