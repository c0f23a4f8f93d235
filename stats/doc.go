// Package stats holds the estimators of an RL paper's comparisons, after
// Agarwal et al., "Deep Reinforcement Learning at the Edge of the
// Statistical Precipice" (NeurIPS 2021, the rliable library): per-run
// scores, normalisation per task, the aggregates mean, median, IQM and
// optimality gap with stratified bootstrap percentile intervals,
// performance profiles, the probability of improvement of one group over
// another, and sample-efficiency curves. REST (httpapi's /api/compare), the
// CLI and the Python client all answer from here; nothing else computes
// these numbers.
//
// The data are groups (the things compared: a learning rate, a method),
// each with runs in tasks (environments). A bootstrap replicate resamples a
// group's runs with replacement within each task (stratified), so every
// task keeps its number of runs.
//
// Scores that are NaN or ±Inf are skipped, never refused: the caller drops
// them (Score says whether a score is usable) and reports how many it
// dropped; the estimators here are given finite scores only, and say so in
// an error otherwise.
//
// This package must never do I/O, read a clock, or draw from a global
// random source: every random draw comes from a PCG stream seeded by the
// caller's Options.Seed, so the same input and seed give the same answer,
// bit for bit, however many goroutines share the work. Every input size is
// bounded (the Max constants), and a bound crossed is an error naming it,
// never a long computation.
package stats
