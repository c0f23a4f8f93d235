// Package e2e holds end-to-end tests of rlsched: they build the real
// `rlsched` binary (or take $RLSCHED_BIN) and drive `rlsched up`,
// `rlsched master` and `rlsched worker` as separate processes over real
// sockets, talking REST with net/http and the worker protocol with raw TCP.
//
// The tests are skipped with `go test -short`; `make test` runs them. Each
// test has its own data directory, ports and secrets, so they run in
// parallel, and every process a test starts is killed when it ends (runs by
// their process group, found through RLSCHED_TASK_ID in /proc/*/environ).
// They need Linux (/proc) and python3 on PATH.
package e2e
