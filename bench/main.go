// Command bench is rlsched's benchmark harness: simulated GPU farms driving a
// real master over real TCP, each figure measured beside a reference taken in
// the same run (raw loopback TCP, a naive goroutine-per-connection master,
// the machine's fork/exec and fsync rates), because the machines it runs on
// are shared and noisy.
//
//	go run ./bench -scenario NAME [-quick]   one scenario (-quick: under 30 s)
//	go run ./bench -all                      every scenario at full size; rewrites BENCHMARKS.md
//	go run ./bench -list                     the scenarios
//
// Every scenario prints, as its last line,
//
//	RESULT scenario=NAME metric=NAME value=X unit=U reference=NAME reference_value=Y ratio=R
//
// with R = X / Y. The master under test is the production binary (go build
// ./cmd/rlsched into a temporary directory) started as `rlsched master` in its
// own process, so its CPU time and peak RSS come from /proc. The harness also
// re-executes itself for its helpers (-role fleet|naive|naive-rest|echo);
// those roles are internal.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// scenario is one benchmark. run measures and returns the tables and the
// RESULT line; it must leave no process behind.
type scenario struct {
	name  string
	about string
	goal  string
	run   func(e *env) (*report, error)
}

var scenarios = []scenario{
	{"dispatch", "submit → claim → ExecuteTask → TaskStarted → TaskFinished with 0 s runs on simulated workers",
		"≥ 50,000 runs/s simulated; p99 submit-to-start ≤ 5 ms at 1,000 runs/s; MySQL ≥ 10,000 runs/s, p99 ≤ 50 ms at 1,000 runs/s", runDispatch},
	{"dispatch-proc", "the same with real `rlsched worker` processes running /bin/true",
		"≥ 80% of the machine's fork/exec rate measured in the same run, data on disk", runDispatchProc},
	{"turnaround", "runs of `sleep 0.1` on 4 fake GPUs through `rlsched up` with its defaults (as root: a uid a run, outputs synced at the end)",
		"the GPUs busy ≥ 97% of the time from the first start to the last end (the limit: 40 runs/s)", runTurnaround},
	{"heartbeat", "N simulated workers connected and heartbeating (10 s interval, and a compressed 1 s interval)",
		"15,000 workers on one master; ≤ 20 KiB RSS per worker (100,000 workers in 2 GiB); CPU per heartbeat ≤ 1.1× the bare gnet echo at 1 s intervals (issue 33: the 2 µs goal was below the kernel's own cost and is retired)", runHeartbeat},
	{"connect-storm", "every worker reconnects at once after a master restart",
		"15,000 workers reconnected and re-registered in ≤ 2 s", runConnectStorm},
	{"rest-submit", "POST /api/train against the real master's REST, SQLite, ack after commit",
		"≥ 5,000 submits/s, p99 ≤ 20 ms; peak RSS ≤ 150 MiB at that load (issue 33)", runRestSubmit},
	{"gateway", "GET /api/workers and POST /api/train through the gateway (every filter on), straight to the master, and through nginx",
		"≥ 1.0× nginx's req/s with every filter on (nginx a plain proxy); p99 ≤ 5 ms at half load (50% of the gateway's peak)", runGatewayBench},
	{"logs", "W simulated workers stream ~120-byte lines into the master's log files while S WebSocket clients follow runs live",
		"≥ 1,000,000 lines/s (≥ 120 MB/s) from 1,000 workers into files with 100 live subscribers; ≥ 25% of raw loopback TCP into files (issue 33: the write path, measured beside, binds first); p99 worker-to-subscriber ≤ 50 ms at half of the measured maximum; ≥ 5× the naive version", runLogs},
	{"sweep", "POST /api/sweeps of 10,000 members on a real master (SQLite on disk), then the group statistics of those members ended with 500 points each",
		"a 10,000-member sweep accepted in ≤ 1 s (one transaction); the first read of its group curves over 10,000 runs × 500 points in ≤ 1 s (issue 33); group statistics over 10,000 runs × 500 metric points in ≤ 200 ms", runSweep},
	{"plan", "one pass of the planner (dispatch/plan) in process over a large queue, beside a naive best-fit loop over the same runs",
		"one pass over 100,000 queued runs of 1,000 users on 2,000 workers × 8 GPUs in ≤ 20 ms", runPlan},
	{"sim", "rlsched sim (package sim) in process: a synthetic year of jobs on 1,000 GPUs under the master's planner",
		"a million jobs on 1,000 GPUs in ≤ 10 minutes on 2 cores and ≤ 2 GiB; events/s and planner passes/s reported", runSim},
	{"sweep-search", "a sweep's search and early stopping (package sweep) in process on the reference problem: TPE beside random search, ASHA and the median rule beside a sweep run to the end",
		"TPE within 5% of the optimum in fewer members than random search (median of 10 seeds); ASHA saves ≥ 50% of a random sweep's GPU-seconds with its best within 5% of the full sweep's", runSweepSearch},
	{"compare", "the comparison estimators (package stats, GET /api/compare) in process: IQM with stratified bootstrap intervals and IQM curves, beside the textbook bootstrap over the same data",
		"IQM with 95% CIs (2,000 reps) for 100 groups × 10 seeds × 5 tasks in ≤ 300 ms; IQM curves for 20 groups × 10 seeds × 1,000 points in ≤ 500 ms", runCompare},
	{"artifacts", "a checkpoint from a real `rlsched worker` into the store (disk, and S3 on SeaweedFS) while simulated runs stream logs to WebSocket subscribers",
		"disk store: ≥ 90% of the lower of the two ceilings measured in the run, the disk's fsynced write and sha256 on one core (issue 33); S3: ≥ 50% of a plain PutObject; the logs' p99 at most 2× during the upload; master memory bounded", runArtifacts},
	{"deps", "a chain of N steps and a fan-in of N parents, and 2-node groups waiting for two busy workers (issue 29), on a real master and `rlsched worker`s running /bin/true",
		"a child starts ≤ 1 s after its last parent ends (p99) over a 1,000-step chain and a 1,000-wide fan-in; a 2-node group starts ≤ 1 s after its second worker frees", runDeps},
	{"replay", "400 pods of Alibaba's 2023 GPU trace (openb) through a real master and simulated workers in compressed time, with their GPU shares and with every share rounded up to a whole GPU",
		"GPU allocation ≥ 10 points above rounding up, mean wait lower, no GPU's shares over-committed (issue 28)", runReplay},
	{"interactive", "interactive sessions (issue 34) on a real master, `rlsched gateway` and `rlsched worker`: one keystroke's echo through all three, and idle sessions with a viewer each",
		"keystroke round trip through gateway, master and worker ≤ 10 ms p99 on loopback; 100 idle sessions cost the master ≤ 10 MiB", runInteractive},
	{"code", "code snapshots (issue 27): `rlsched submit --code` of a 20 MB, 2,000-file tree against a real master, again with one file changed; the worker's cache making an attempt's copy of a cached tree beside a cold extract",
		"resubmitted with one change accepted in ≤ 300 ms; a cached tree materialised in ≤ 50 ms and ≤ 10% of a cold extract; a warm venv adds ≤ 1 s to a run's start", runCode},
	{"claims", "claim → renew → release cycles through the Redis lease backend (rueidis, Lua by EVALSHA) from many goroutines, beside redis-benchmark running the same scripts",
		"none set in issue 5: the ratio of rueidis cycles/s to redis-benchmark's EVALSHA rate for the same three scripts is reported", runClaims},
	{"resources", "issue 26's control groups on a real master and `rlsched worker`: a run's start with and without enforcement, two runs of one core each beside a process that spins, a latency-sensitive run beside a memory-hungry one",
		"enforcement adds ≤ 5 ms to a run's start; each 1-core run gets 0.95–1.05 cores; the neighbour moves the p99 step time by ≤ 10%", runResources},
}

func main() {
	role := flag.String("role", "", "internal: run as a helper process (fleet, naive, naive-rest, echo)")
	name := flag.String("scenario", "", "scenario to run (see -list)")
	quick := flag.Bool("quick", false, "small sizes: one scenario in under 30 s")
	all := flag.Bool("all", false, "run every scenario at full size and rewrite BENCHMARKS.md")
	list := flag.Bool("list", false, "list the scenarios")
	out := flag.String("out", "", "file -all writes (default BENCHMARKS.md at the module root); with -scenario, a file of that scenario's report in BENCHMARKS.md's form")
	profile := flag.String("profile", "", "directory: build the master with a pprof hook (bench/overlay) and write CPU, heap and allocation profiles of each measured window there")
	keep := flag.Bool("keep", false, "keep the temporary directory (master logs, databases)")
	flag.Parse()

	if *role != "" {
		if err := runRole(*role); err != nil {
			fmt.Fprintln(os.Stderr, "bench role", *role+":", err)
			os.Exit(1)
		}
		return
	}
	if *list {
		for _, s := range scenarios {
			fmt.Printf("%-14s %s\n%14s goal: %s\n", s.name, s.about, "", s.goal)
		}
		return
	}
	if !*all && *name == "" {
		fmt.Fprintln(os.Stderr, "usage: go run ./bench -scenario NAME [-quick] | -all | -list")
		os.Exit(2)
	}
	e, err := newEnv(*quick && !*all, *profile, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	defer e.close()
	var todo []scenario
	if *all {
		todo = scenarios
	} else {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == *name })
		if i < 0 {
			names := []string{}
			for _, s := range scenarios {
				names = append(names, s.name)
			}
			fmt.Fprintf(os.Stderr, "bench: unknown scenario %q; choose one of %s\n", *name, strings.Join(names, ", "))
			os.Exit(2)
		}
		todo = []scenario{scenarios[i]}
	}
	var reports []*report
	failed := false
	for _, s := range todo {
		began := time.Now()
		e.logf("scenario %s (%s)", s.name, e.sizeName())
		rep, err := s.run(e)
		e.cleanup()
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: scenario %s failed: %v\n", s.name, err)
			failed = true
			continue
		}
		rep.scenario = s
		rep.elapsed = time.Since(began)
		rep.command = "go run ./bench -scenario " + s.name
		if e.quick {
			rep.command += " -quick"
		}
		rep.print(os.Stdout)
		reports = append(reports, rep)
	}
	if (*all || *out != "") && len(reports) > 0 {
		path := *out
		if path == "" {
			path = e.root + "/BENCHMARKS.md"
		}
		if err := writeMarkdown(path, e, reports); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			failed = true
		} else {
			fmt.Fprintln(os.Stderr, "bench: wrote", path)
		}
	}
	if failed {
		e.close()
		os.Exit(1)
	}
}
