// Package earlystop decides which members of a sweep to stop before their
// end, from the metric they report as they run (API.md "Sweep search and
// early stopping"): asynchronous successive halving (ASHA, Li et al., "A
// System for Massively Parallel Hyperparameter Tuning", MLSys 2020) or the
// median stopping rule (Golovin et al., "Google Vizier", KDD 2017).
//
// A Stopper is fed reports (member, step, value) in the order they arrive
// and answers with a Decision; every rung decision and every stop is kept
// with its rung and its cut, so the sweep page can say why each member
// stopped. A member that never reports is never judged, so never stopped
// for lacking the metric.
//
// It never does I/O, never reads a clock and never draws randomness: the
// same reports in the same order give the same decisions. A Stopper is not
// safe for use by several goroutines; its owner (the sweep's controller)
// serialises the reports.
package earlystop
