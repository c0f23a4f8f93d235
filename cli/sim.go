package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/sim"
	"github.com/rlsched/rlsched/sim/simplot"
)

func init() {
	register(&command{
		name: "sim",
		args: "(--cluster FILE | --from URL) --trace FILE --format philly|helios|alibaba|alibaba2023|synthetic|history [--policy SPEC]... [--policies A,B,...] " +
			"[--checkpoint-every D] [--tick D] [--jobs-csv FILE] [--plot DIR] [--json]",
		summary: "Simulate a trace on a cluster under the master's own planner, policies side by side (docs/sim.md).",
		details: `The cluster is a JSON file (--cluster: workers, their GPUs and slots, quotas, a fault
schedule) or the workers a live master lists (--from URL: GET /api/workers, logged in as for
` + "`rlsched workers`" + `). The trace is a Philly cluster_job_log, a Helios cluster_log.csv, Alibaba's
pai_job_table.csv (its pai_task_table.csv beside it, or --tasks FILE), Alibaba 2023's
openb_pod_list.csv (--format alibaba2023), history (--trace history: the runs of the master
at --from URL, or --server, that the ls filters --since, --user, --project, ... select), or
for --format synthetic
a spec such as jobs=10000,users=50,span=720h,median=30m,high=0.1,preemptible=0.5,seed=1.

Each --policy is simulated on the same trace: rlsched (the master's defaults), fifo (no fair
share, quotas, reservations or preemption), sjf (fifo, shortest oracle duration first),
tiresias (fifo with Tiresias' 2D-LAS levels as priorities, every run preemptible), slurm
(Slurm's multifactor priority, age and fair share, with backfill and reservations), or
NAME:key=value,... from rlsched's defaults with halflife=D, reserve=D|off
(BACKFILL_RESERVE_SECONDS), preempt=D|off (PREEMPT_COOLDOWN_SECONDS), quota=N
(DEFAULT_USER_GPU_QUOTA), fifo=true, order=trace|sjf|tiresias|multifactor. --policies takes names only,
comma-separated. Default: rlsched and fifo. A preempted run, or one
on a worker that fails, keeps its work up to its last checkpoint (--checkpoint-every; 0: it
starts over). Jobs the cluster can never run, and jobs that never started, are listed with
their reason.`,
		examples: []string{
			"rlsched sim --cluster lab.json --trace cluster_log.csv --format helios --policies rlsched,fifo,sjf,tiresias",
			"rlsched sim --cluster lab.json --trace cluster_job_log --format philly --policy rlsched --policy hl24:halflife=24h --policy fifo",
			"rlsched sim --from http://master:8082 --trace jobs=5000,users=20 --format synthetic --checkpoint-every 30m --json",
			"rlsched sim --from http://master:8082 --trace history --since 30d --policy rlsched --policy hl24:halflife=24h",
		},
		run: runSim,
	})
}

// simJSON is sim --json's output.
type simJSON struct {
	Trace struct {
		Format  string        `json:"format"`
		Jobs    int           `json:"jobs"`
		Ignored []string      `json:"ignoredColumns"`
		Skipped []sim.Skipped `json:"skipped"`
	} `json:"trace"`
	Cluster struct {
		Workers int `json:"workers"`
		GPUs    int `json:"gpus"`
	} `json:"cluster"`
	Policies []simPolicyJSON `json:"policies"`
}

type simPolicyJSON struct {
	sim.Summary
	// NotRun are the jobs the policy did not run: the cluster fits them
	// nowhere, or they never started (the planner's reason).
	NotRun []sim.Skipped `json:"notRun"`
}

func runSim(inv *invocation, args []string) int {
	fs := inv.newFlags()
	clusterFile := fs.String("cluster", "", "the cluster `FILE` (JSON, docs/sim.md)")
	from := fs.String("from", "", "take the cluster from the master at `URL` (GET /api/workers)")
	traceArg := fs.String("trace", "", "the trace `FILE`, or the synthetic spec")
	format := fs.String("format", "", "the trace's format: "+strings.Join(sim.Formats, ", "))
	tasks := fs.String("tasks", "", "Alibaba's pai_task_table `FILE` (default: beside --trace)")
	var policies multiFlag
	fs.Var(&policies, "policy", "a policy `SPEC` to simulate (repeatable; default rlsched and fifo)")
	names := fs.String("policies", "", "policies to simulate by `NAME,NAME,...` (rlsched, fifo, sjf, tiresias, slurm), after the --policy ones")
	checkpoint := fs.Duration("checkpoint-every", 0, "a run keeps its work every `D` (0: a stopped run starts over)")
	tick := fs.Duration("tick", 0, "also pass every `D` of simulated time while runs wait (0: only when something is due)")
	jobsCSV := fs.String("jobs-csv", "", "write every finished job's times to `FILE` (CSV)")
	jsonOut := fs.Bool("json", false, "print the summaries as JSON")
	plotDir := fs.String("plot", "", "write SVG charts into `DIR` (JCT CDFs, GPU utilisation over time, per-user waits)")
	wholeGPUs := fs.Bool("whole-gpus", false, "round every job's share of a GPU up to a whole GPU (beside a run with the shares kept: what sharing gains)")
	filters := addRunFilters(fs)
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	if *traceArg == "history" && (*format == "" || *format == "history") {
		*format = "history"
	}
	switch {
	case (*clusterFile == "") == (*from == ""):
		return inv.usageError("give one of --cluster FILE and --from URL")
	case *traceArg == "" && *format != "synthetic" && *format != "history":
		return inv.usageError("--trace is required")
	case *format == "":
		return inv.usageError("--format is required: one of %s", strings.Join(sim.Formats, ", "))
	case *checkpoint < 0 || *tick < 0:
		return inv.usageError("--checkpoint-every and --tick must be 0 or more")
	}
	var specs []sim.Policy
	for _, n := range strings.Split(*names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			policies = append(policies, n)
		}
	}
	if len(policies) == 0 {
		policies = multiFlag{"rlsched", "fifo"}
	}
	for _, p := range policies {
		sp, err := sim.ParsePolicy(p)
		if err != nil {
			return inv.usageError("%v", err)
		}
		specs = append(specs, sp)
	}
	c, code, ok := inv.simCluster(*clusterFile, *from)
	if !ok {
		return code
	}
	var tr *sim.Trace
	if *format == "history" {
		tr, code, ok = inv.simHistory(*from, filters)
	} else {
		tr, code, ok = inv.simTrace(*format, *traceArg, *tasks)
	}
	if !ok {
		return code
	}
	if *wholeGPUs {
		tr.WholeGPUs()
	}
	if !c.NamesGPUTypes() && slices.ContainsFunc(tr.Jobs, func(j sim.Job) bool { return len(j.GPUType) > 0 }) {
		tr.Ignored = append(tr.Ignored, "the jobs' GPU types (the cluster names none)")
	}

	// One policy at a time, each result dropped once summarised and
	// written: a million jobs' results are most of a simulation's memory.
	var csvOut *os.File
	if *jobsCSV != "" {
		f, err := os.Create(*jobsCSV)
		if err != nil {
			return inv.fail(fmt.Errorf("cannot write the jobs CSV: %w", err))
		}
		defer f.Close()
		csvOut = f
		if _, err := f.WriteString(strings.Join(sim.JobsCSVHeader, ",") + "\n"); err != nil {
			return inv.fail(fmt.Errorf("cannot write the jobs CSV: %w", err))
		}
	}
	summaries := make([]sim.Summary, len(specs))
	notRun := make([][]sim.Skipped, len(specs))
	var jctCurves, utilCurves []simplot.Curve // a thousand points each: the results themselves are dropped
	workers := 0
	for i, p := range specs {
		r, err := sim.Run(c, tr, sim.Config{Policy: p, CheckpointEvery: *checkpoint, Tick: *tick})
		if err != nil {
			return inv.fail(err)
		}
		if csvOut != nil {
			if err := sim.WriteJobsCSV(csvOut, r); err != nil {
				return inv.fail(fmt.Errorf("cannot write the jobs CSV: %w", err))
			}
		}
		summaries[i], notRun[i], workers = r.Summarize(), r.Skipped[len(tr.Skipped):], r.Workers
		if *plotDir != "" {
			jctCurves, utilCurves = append(jctCurves, simplot.JCTCDF(r)), append(utilCurves, simplot.Utilisation(r))
		}
	}
	if *plotDir != "" {
		if err := writePlots(*plotDir, jctCurves, utilCurves, summaries); err != nil {
			return inv.fail(err)
		}
	}
	if csvOut != nil {
		if err := csvOut.Close(); err != nil {
			return inv.fail(fmt.Errorf("cannot write the jobs CSV: %w", err))
		}
	}
	if *jsonOut {
		var out simJSON
		out.Trace.Format, out.Trace.Jobs, out.Trace.Ignored, out.Trace.Skipped = *format, len(tr.Jobs), tr.Ignored, tr.Skipped
		out.Trace.Ignored = append([]string{}, out.Trace.Ignored...)
		out.Trace.Skipped = append([]sim.Skipped{}, out.Trace.Skipped...)
		out.Cluster.GPUs = c.GPUs()
		out.Cluster.Workers = workers
		for i, s := range summaries {
			out.Policies = append(out.Policies, simPolicyJSON{Summary: s, NotRun: append([]sim.Skipped{}, notRun[i]...)})
		}
		raw, err := json.Marshal(out)
		if err != nil {
			return inv.fail(err)
		}
		return inv.printJSON(raw)
	}
	w := inv.env.Stdout
	fmt.Fprintf(w, "%s trace: %d jobs on %d workers, %d GPUs", *format, len(tr.Jobs), workers, c.GPUs())
	if len(tr.Ignored) > 0 {
		fmt.Fprintf(w, " (ignored columns: %s)", strings.Join(tr.Ignored, ", "))
	}
	fmt.Fprintln(w)
	printSkipped(w, "not read from the trace", tr.Skipped)
	for i, p := range specs {
		printSkipped(w, "not run under "+p.Name, notRun[i])
	}
	fmt.Fprintln(w)
	if err := sim.WriteTable(w, summaries); err != nil {
		return inv.fail(fmt.Errorf("cannot write the output: %w", err))
	}
	return ExitOK
}

// writePlots writes sim's charts into dir (made if missing).
func writePlots(dir string, jct, util []simplot.Curve, ss []sim.Summary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot make the plot directory: %w", err)
	}
	charts := []struct {
		name string
		draw func(io.Writer) error
	}{
		{"jct_cdf.svg", func(w io.Writer) error {
			return simplot.Lines(w, "Job completion time (CDF)", "JCT, hours (log)", "fraction of jobs", jct, true)
		}},
		{"utilisation.svg", func(w io.Writer) error {
			return simplot.Lines(w, "GPUs held over time", "days from the first submission", "% of the cluster's GPUs", util, false)
		}},
		{"user_wait.svg", func(w io.Writer) error { return simplot.UserWaits(w, ss) }},
	}
	for _, c := range charts {
		f, err := os.Create(filepath.Join(dir, c.name))
		if err != nil {
			return fmt.Errorf("cannot write a chart: %w", err)
		}
		err = c.draw(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cannot write %s: %w", c.name, err)
		}
	}
	return nil
}

// printSkipped lists a few skipped jobs with their reasons and counts the
// rest (--json lists every one).
func printSkipped(w io.Writer, what string, ss []sim.Skipped) {
	if len(ss) == 0 {
		return
	}
	fmt.Fprintf(w, "%d jobs %s:\n", len(ss), what)
	const shown = 5
	for _, s := range ss[:min(shown, len(ss))] {
		fmt.Fprintf(w, "  %s: %s\n", s.ID, s.Reason)
	}
	if len(ss) > shown {
		fmt.Fprintf(w, "  and %d more (--json lists every one)\n", len(ss)-shown)
	}
}

func (inv *invocation) simCluster(file, from string) (*sim.Cluster, int, bool) {
	if from != "" {
		inv.server = from
		cl, code, ok := inv.newClient()
		if !ok {
			return nil, code, false
		}
		ws, code, ok := getItems[core.WorkerInfo](inv, cl, "/api/workers", nil, false)
		if !ok {
			return nil, code, false
		}
		return sim.FromWorkers(ws), ExitOK, true
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, inv.fail(fmt.Errorf("cannot open the cluster file: %w", err)), false
	}
	defer f.Close()
	c, err := sim.ReadCluster(f)
	if err != nil {
		return nil, inv.fail(err), false
	}
	return c, ExitOK, true
}

// simHistory is the trace of a master's own runs: every page of GET
// /api/tasks the ls filters select, from the master at from (else
// --server's).
func (inv *invocation) simHistory(from string, filters *runFilters) (*sim.Trace, int, bool) {
	if from != "" {
		inv.server = from
	}
	q := url.Values{}
	if code, ok := filters.query(inv, q); !ok {
		return nil, code, false
	}
	q.Set("limit", "500")
	cl, code, ok := inv.newClient()
	if !ok {
		return nil, code, false
	}
	var runs []core.Task
	seen := map[string]bool{}
	for {
		var page struct {
			Items      []core.Task `json:"items"`
			NextCursor string      `json:"nextCursor"`
		}
		if _, err := cl.getJSON(inv.ctx, "/api/tasks", q, &page); err != nil {
			return nil, inv.fail(err), false
		}
		runs = append(runs, page.Items...)
		if page.NextCursor == "" {
			break
		}
		if seen[page.NextCursor] || len(page.Items) == 0 {
			return nil, inv.fail(errors.New("the server keeps answering the same page of runs: stopping (a server bug)")), false
		}
		seen[page.NextCursor] = true
		q.Set("cursor", page.NextCursor)
	}
	return sim.FromTasks(runs), ExitOK, true
}

func (inv *invocation) simTrace(format, arg, tasks string) (*sim.Trace, int, bool) {
	var tr *sim.Trace
	var err error
	switch format {
	case "synthetic":
		s, perr := sim.ParseSynthetic(arg)
		if perr != nil {
			return nil, inv.usageError("%v", perr), false
		}
		return s.Trace(), ExitOK, true
	case "philly", "helios", "alibaba2023":
		f, oerr := os.Open(arg)
		if oerr != nil {
			return nil, inv.fail(fmt.Errorf("cannot open the trace: %w", oerr)), false
		}
		defer f.Close()
		switch format {
		case "philly":
			tr, err = sim.ReadPhilly(f)
		case "helios":
			tr, err = sim.ReadHelios(f)
		default:
			tr, err = sim.ReadOpenB(f)
		}
	case "alibaba":
		if tasks == "" {
			tasks = filepath.Join(filepath.Dir(arg), "pai_task_table.csv")
		}
		jf, oerr := os.Open(arg)
		if oerr != nil {
			return nil, inv.fail(fmt.Errorf("cannot open the job table: %w", oerr)), false
		}
		defer jf.Close()
		tf, oerr := os.Open(tasks)
		if oerr != nil {
			return nil, inv.fail(fmt.Errorf("cannot open the task table (--tasks): %w", oerr)), false
		}
		defer tf.Close()
		tr, err = sim.ReadAlibaba(jf, tf)
	default:
		return nil, inv.usageError("unknown --format %q: one of %s", format, strings.Join(sim.Formats, ", ")), false
	}
	if err != nil {
		return nil, inv.fail(err), false
	}
	return tr, ExitOK, true
}
