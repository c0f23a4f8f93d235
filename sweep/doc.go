// Package sweep is the pure logic of sweeps and seed groups (API.md "Sweeps
// and seed groups"): it parses and validates a sweep spec, expands it into
// its members' params and summarises the members' runs into groups (final
// reward mean ± std, step-aligned mean ± std curves). Which members a retry
// reruns is the domain's rule (core.SweepRetried), which the stores apply.
//
// It never does I/O: no store, no clock, no global randomness. The same
// spec always expands to the same members in the same order, so the REST
// layer can create them in one transaction and a test can predict them.
//
// Its subpackages are the pure parts of searching a sweep (API.md "Sweep
// search and early stopping"): goal (which way is better), tpe (proposing
// params), earlystop (ASHA and the median rule) and importance (which
// params mattered). tpe and earlystop import only goal, importance only
// tpe (for its Space); sweep imports goal, earlystop (to check a spec's
// earlyStop) and tpe (a spec's Space, whose points Proposal turns into
// members and Point reads back), and besides core only internal/clip (to
// quote a bad value in an error) and stats (the IQM of a proposal's
// seeds, Outcomes). The master's sweep controller (package sweepctl)
// drives the search and the stops; httpapi answers the best and the
// importances.
package sweep
