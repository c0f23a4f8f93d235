// Package obs is the Prometheus side of the master and the gateway: the
// metrics API.md names (and those an operator graphs beside them), each in a
// registry of its own, and the fasthttp handler that serves /metrics.
//
// A MasterMetrics or a GatewayMetrics is made per process part (no
// package-level metrics: two masters in one test process keep theirs
// apart). Counters and histograms on hot paths are typed methods over label
// children resolved when it is made, so a call is one or two atomic adds
// and never a map lookup or an allocation. Gauges of state the master
// already holds (runs by status, workers, GPUs, queues, subscribers) are
// read at scrape time from callbacks the master passes (SetSources): nothing
// polls, and nothing keeps a second copy of the state.
//
// Every label takes values from a closed set (statuses, states, route
// templates, status classes) or from a set capped here (workers' GPUs,
// upstream instances): never a run id, a user or a raw path.
//
// obs never blocks its callers beyond an atomic add, never calls back into
// the master outside a scrape, and never starts a goroutine.
package obs
