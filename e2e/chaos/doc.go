// Package chaos is the chaos soak of issue 11 and the regression tests of
// the violations it found. It starts a whole deployment as real processes
// of the binary under test (two masters on a private MariaDB and a private
// Redis, four workers, each behind TCP proxies the test controls), submits
// a stream of runs that record every execution of themselves, lets a
// nemesis kill, freeze, partition and restart parts of it, and then checks
// the history: every acknowledged run ended, no two executions of a run
// overlapped, no GPU was held twice at once, every log is byte-exact, and
// what either master answered about a run never went backwards.
//
// The soak lasts RLSCHED_CHAOS_DURATION (a Go duration; short by default,
// so that `go test ./...` runs it; `make chaos` sets 30m). See
// docs/reliability.md, "The chaos soak", for what it injects and checks.
//
// Everything here is tests: the package must never touch the shared Redis
// or MariaDB (it starts private ones), nor leave a process running.
package chaos
