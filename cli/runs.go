package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name: "ls",
		args: "[--status S] [--user U] [--project P] [--tag T] [--name S] [--note S] [--is-baseline] [--sweep ID] [--param K=V ...] " +
			"[--since T] [--until T] [--limit N] [--all] [--json | --csv]",
		summary: "List runs, newest first.",
		details: "Without --all one page is shown (the server's default size, or --limit); --all follows\n" +
			"the pages to the end (--limit is then the page size).\n\n" +
			"--name and --note match a part of the name or the note, without case; --is-baseline keeps the runs\n" +
			"marked as baselines (rlsched edit). --param K=V matches runs whose param K equals V\n" +
			"as JSON values (--param lr=0.001 matches 1e-3; --param env=CartPole-v1 a string). --since and\n" +
			"--until take an RFC 3339 time, a date (2025-03-01, UTC) or an age (90m, 36h, 7d): runs created\n" +
			"at or after --since and before --until. --csv prints id, name, user, project, status, attempt,\n" +
			"createdAt, finishedAt, finalReward and a column per param.",
		examples: []string{"rlsched ls --status RUNNING", "rlsched ls --project cartpole --all --json | jq '.items[].finalReward'",
			"rlsched ls --sweep $id --param lr=1e-3 --csv > lr.csv", "rlsched ls --tag baseline --since 7d"},
		run: runLs,
	})
	register(&command{
		name:     "show",
		args:     "ID [--json]",
		summary:  "Show one run as key: value lines.",
		examples: []string{"rlsched show $id", "rlsched show $id | grep ^status:"},
		run:      runShow,
	})
	register(&command{
		name:    "cancel",
		args:    "ID",
		summary: "Cancel a run and print its status.",
		details: "A queued run is CANCELLED at once; a running one is stopped by its worker, so the status\n" +
			"printed may still be RUNNING. Only the owner or an admin may cancel.",
		run: runCancel,
	})
	register(&command{
		name:    "rerun",
		args:    "ID [--param KEY=VALUE ...] [--resume-from RUN] [--code DIR] [--wait | --follow] [--json]",
		summary: "Start a new run with the same spec and code snapshot, optionally changing params; print its id.",
		details: "--param values are merged into the original run's params (the others are kept).\n" +
			"--resume-from RUN starts the new run with the newest output files of RUN (often ID itself)\n" +
			"and RLSCHED_RESUME=1, so a trainer that checkpoints continues where RUN stopped.\n" +
			"The rerun runs the original run's code snapshot; --code DIR (e.g. --code .) takes a new one.",
		examples: []string{
			"rlsched rerun $id",
			"rlsched rerun $id --param lr=1e-4 --param seed=7 --wait",
			"rlsched rerun $id --resume-from $id --param episodes=2000",
		},
		run: runRerun,
	})
	register(&command{
		name:    "metrics",
		args:    "ID [--names a,b] [--times] [--json]",
		summary: "Print a run's metric series as step,value CSV, one block per name.",
		details: "Each series is printed as a `# NAME` line, a `step,value` header and its rows; series are\n" +
			"separated by a blank line. --times adds a time_unix_ms column: when each point was logged\n" +
			"(empty when not known).",
		examples: []string{"rlsched metrics $id --names episode_reward", "rlsched metrics $id --names episode_reward --times"},
		run:      runMetrics,
	})
}

// runID takes and checks the ID argument.
func (inv *invocation) runID(p parsed) (string, int, bool) {
	id := p.pos[0]
	if !core.ValidTaskID(id) {
		return "", inv.usageError("invalid run id %q: ids are 1–64 of A-Z a-z 0-9 _ -", id), false
	}
	return id, ExitOK, true
}

func runShow(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	id, c, code, ok := inv.startOn(args, inv.runID)
	if !ok {
		return code
	}
	t, raw, err := c.getTask(inv.ctx, id)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	codeVer, dirty := "-", "-"
	if t.Code.GitCommit != "" {
		codeVer, dirty = t.Code.GitCommit, strconv.FormatBool(t.Code.GitDirty)
	}
	gpuIdx := "-"
	if len(t.GPUIndices) > 0 {
		gpuIdx = joinInts(t.GPUIndices)
	}
	timeout := "-"
	if t.TimeoutSeconds > 0 {
		timeout = strconv.Itoa(t.TimeoutSeconds)
	}
	lines := [][2]string{
		{"id", t.ID},
		{"name", orDash(t.Name)},
		{"project", orDash(t.Project)},
		{"user", orDash(t.User)},
		{"status", string(t.Status)},
		{"attempt", strconv.Itoa(t.Attempt)},
		{"maxRetries", strconv.Itoa(t.MaxRetries)},
		{"command", orDash(shellJoin(t.Command))},
		{"params", compactJSON(t.Params)},
		{"gpus", strconv.FormatFloat(t.GPUCount(), 'g', -1, 64)},
		{"nodes", strconv.Itoa(t.Group())},
		{"gpuIndices", gpuIdx},
		{"gpuUuids", orDash(strings.Join(t.GPUUUIDs, ","))},
		{"cpus", cpusLine(t.CPUs)},
		{"memory", memoryLine(t.MemoryMB)},
		{"priority", strconv.Itoa(t.Priority)},
		{"timeoutSeconds", timeout},
		{"env", envString(t.Env)},
		{"tags", orDash(strings.Join(t.Tags, ","))},
		{"baseline", strconv.FormatBool(t.Baseline)},
		{"note", orDash(oneLine(t.Note))},
		{"workdir", orDash(t.Workdir)},
		{"python", pythonLine(t.Python)},
		{"image", orDash(t.Image)},
		{"private", strconv.FormatBool(t.Private)},
		{"kind", orDash(t.Kind)},
		{"worker", orDash(t.Worker)},
		{"traceId", orDash(t.TraceID)},
		{"exitCode", formatInt(t.ExitCode)},
		{"error", orDash(oneLine(t.Error))},
		{"reason", orDash(t.Reason)},
		{"usage", usageLine(t.Usage)},
		{"using", usingLine(inv, c, t)},
		{"finalReward", formatFloat(t.FinalReward, false)},
		{"code", codeVer},
		{"gitDirty", dirty},
		{"gitRemote", orDash(t.Code.GitRemote)},
		{"diff", diffLine(t)},
		{"codeTree", codeTreeLine(t.Code)},
		{"createdAt", formatTime(&t.CreatedAt)},
		{"startedAt", formatTime(t.StartedAt)},
		{"finishedAt", formatTime(t.FinishedAt)},
		{"rerunOf", orDash(t.RerunOf)},
		{"resumeFrom", orDash(t.ResumeFrom)},
		{"after", afterLine(t.After)},
		{"inputsFrom", orDash(strings.Join(t.InputsFrom, ", "))},
		{"sweepId", orDash(t.SweepID)},
		{"preemptible", strconv.FormatBool(t.Preemptible)},
		{"preemptions", strconv.Itoa(t.Preemptions)},
	}
	for _, w := range t.Warnings {
		// gpu_foreign, idle_gpu, artifact_limit, ...: one line each, oldest first
		lines = append(lines, [2]string{"warning", formatTime(&w.At) + " " + w.Code + ": " + oneLine(w.Message)})
	}
	for _, e := range t.History {
		// One line per state change, oldest first: every attempt, where it
		// ran and why it ended.
		s := formatTime(&e.At) + " " + e.Status + " attempt " + strconv.Itoa(e.Attempt)
		if e.Worker != "" {
			s += " on " + e.Worker
		}
		if e.Reason != "" {
			s += ": " + oneLine(e.Reason)
		}
		lines = append(lines, [2]string{"history", s})
	}
	var b bytes.Buffer
	for _, l := range lines {
		fmt.Fprintf(&b, "%s: %s\n", l[0], l[1])
	}
	if t.ErrorTail != "" {
		// The end of its log, as it printed it: one line each, indented.
		b.WriteString("errorTail: |\n")
		for _, l := range strings.Split(t.ErrorTail, "\n") {
			b.WriteString("  " + l + "\n")
		}
	}
	if _, err := inv.env.Stdout.Write(b.Bytes()); err != nil {
		return inv.fail(err)
	}
	return ExitOK
}

// cpusLine, memoryLine and usageLine write a run's resources for show.
func cpusLine(cpus float64) string {
	if cpus <= 0 {
		return "-"
	}
	return core.FormatCPUs(cpus)
}

func memoryLine(mb int64) string {
	if mb <= 0 {
		return "-"
	}
	return core.FormatMB(mb)
}

func usageLine(u *core.Usage) string {
	if u == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f CPU-seconds, peak memory %s, %.0f GPU-seconds", u.CPUSeconds, core.FormatMB(u.PeakMemoryMB), u.GPUSeconds)
}

// usingLine is what a RUNNING run uses now: the last points of its series
// sys/cpu_cores and sys/memory_mb, with the sample's time; "-" for a run
// that is not running or has no sample (a worker without control groups).
func usingLine(inv *invocation, c *client, t core.Task) string {
	if t.Status != core.StatusRunning {
		return "-"
	}
	var ans struct {
		Series map[string][][2]*float64 `json:"series"`
	}
	q := url.Values{"names": {"sys/cpu_cores,sys/memory_mb"}}
	if _, err := c.getJSON(inv.ctx, taskPath(t.ID, "/metrics"), q, &ans); err != nil {
		return "- (" + oneLine(err.Error()) + ")"
	}
	last := func(name string) (at, v float64, ok bool) {
		pts := ans.Series[name]
		if len(pts) == 0 || pts[len(pts)-1][0] == nil || pts[len(pts)-1][1] == nil {
			return 0, 0, false
		}
		return *pts[len(pts)-1][0], *pts[len(pts)-1][1], true
	}
	at, cores, okC := last("sys/cpu_cores")
	_, mem, okM := last("sys/memory_mb")
	if !okC || !okM {
		return "-"
	}
	when := time.Unix(int64(at), 0)
	return fmt.Sprintf("%s cores, %s at %s", strconv.FormatFloat(cores, 'f', 2, 64), core.FormatMB(int64(mem)), formatTime(&when))
}

// diffLine says whether the run's diff is stored and how to read it.
func diffLine(t core.Task) string {
	switch {
	case t.Code.HasDiff:
		return "stored: rlsched diff " + t.ID
	case t.Code.DiffOmitted != "":
		return "not stored: " + oneLine(t.Code.DiffOmitted)
	}
	return "-"
}

func compactJSON(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" || string(t) == "{}" {
		return "-"
	}
	var b bytes.Buffer
	if json.Compact(&b, t) != nil {
		return string(t)
	}
	return b.String()
}

// envString is the env as a JSON object (unambiguous with spaces and '=').
func envString(env map[string]string) string {
	if len(env) == 0 {
		return "-"
	}
	b, _ := json.Marshal(env) // sorted keys
	return string(b)
}

func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", " | ") }

// taskPage is GET /api/tasks's answer; items stay raw for --json.
type taskPage struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"nextCursor"`
}

func runLs(inv *invocation, args []string) int {
	fs := inv.newFlags()
	filters := addRunFilters(fs)
	limit := fs.Int("limit", 0, "at most `N` runs (1–500; with --all the page size)")
	all := fs.Bool("all", false, "follow the pages to the last run")
	jsonOut := fs.Bool("json", false, `print the server's JSON ({"items":[...],"nextCursor"}; with --all one object with every item)`)
	csvOut := fs.Bool("csv", false, "print the runs as CSV, a column per param (the server's ?format=csv)")
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	if *jsonOut && *csvOut {
		return inv.usageError("give --json or --csv, not both")
	}
	q := url.Values{}
	if code, ok := filters.query(inv, q); !ok {
		return code
	}
	if fs.isSet("limit") {
		if *limit < 1 || *limit > 500 {
			return inv.usageError("--limit must be 1–500")
		}
		q.Set("limit", strconv.Itoa(*limit))
	} else if *all {
		q.Set("limit", "500")
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if *csvOut {
		return inv.lsCSV(c, q, *all)
	}
	var items []json.RawMessage
	var next string
	seen := map[string]bool{}
	for {
		var page taskPage
		if _, err := c.getJSON(inv.ctx, "/api/tasks", q, &page); err != nil {
			return inv.fail(err)
		}
		items = append(items, page.Items...)
		next = page.NextCursor
		if !*all || next == "" {
			break
		}
		if seen[next] || len(page.Items) == 0 {
			return inv.fail(errors.New("the server keeps answering the same page: stopping --all (a server bug; try without --all)"))
		}
		seen[next] = true
		q.Set("cursor", next)
	}
	if *jsonOut {
		if items == nil {
			items = []json.RawMessage{}
		}
		out := taskPage{Items: items}
		if !*all {
			out.NextCursor = next
		}
		b, err := json.Marshal(out)
		if err != nil {
			return inv.fail(err)
		}
		return inv.printJSON(b)
	}
	if len(items) == 0 {
		// A bare header reads as a broken command.
		fmt.Fprintln(inv.env.Stderr, "no runs match")
		return ExitOK
	}
	now := inv.env.now()
	tb := newTable("ID", "STATUS", "NAME", "USER", "WORKER", "GPUS", "REWARD", "CREATED")
	for _, raw := range items {
		var t core.Task
		if err := json.Unmarshal(raw, &t); err != nil {
			return inv.fail(fmt.Errorf("cannot understand a run in the server's list: %v", err))
		}
		name := fitWidth(t.Name, 40)
		if t.Kind == core.KindInteractive {
			name = "[shell] " + fitWidth(t.Name, 32) // rlsched attach ID reaches it while it runs
		}
		tb.rowf("%s\t%s\t%s\t%s\t%s\t%g\t%s\t%s\n", t.ID, t.Status, orDash(name),
			orDash(t.User), orDash(t.Worker), t.GPUCount(), formatFloat(t.FinalReward, true), age(now, t.CreatedAt))
	}
	if err := inv.printTable(tb); err != nil {
		return inv.fail(err)
	}
	if !*all && next != "" {
		fmt.Fprintf(inv.env.Stderr, "(more runs: add --all, or --limit N)\n")
	}
	return ExitOK
}

// runFilters are the flags of GET /api/tasks' filters, which ls and compare
// share.
type runFilters struct {
	fs                                                                   *flagSet
	status, user, project, tag, name, note, sweep, rerunOf, since, until *string
	isBaseline                                                           *bool
	params                                                               multiFlag
}

func addRunFilters(fs *flagSet) *runFilters {
	f := &runFilters{fs: fs}
	f.status = fs.String("status", "", "only runs in `STATUS` (QUEUED, RUNNING, SUCCEEDED, FAILED, ...)")
	f.user = fs.String("user", "", "only runs of `USER`")
	f.project = fs.String("project", "", "only runs of `PROJECT`")
	f.tag = fs.String("tag", "", "only runs tagged `TAG`")
	f.name = fs.String("name", "", "only runs whose name contains `TEXT` (without case)")
	f.note = fs.String("note", "", "only runs whose note contains `TEXT` (without case)")
	f.isBaseline = fs.Bool("is-baseline", false, "only runs marked as a baseline (rlsched edit --baseline true)")
	f.sweep = fs.String("sweep", "", "only members of sweep `ID` (every run of each)")
	f.rerunOf = fs.String("rerun-of", "", "only reruns of run `ID`")
	f.since = fs.String("since", "", "only runs created at or after `T` (RFC 3339, a date, or an age like 7d)")
	f.until = fs.String("until", "", "only runs created before `T` (RFC 3339, a date, or an age like 36h)")
	fs.Var(&f.params, "param", "only runs whose param `KEY=VALUE` (repeatable; compared as JSON values)")
	return f
}

// query adds the filters given to q; ok=false means the command is over
// (a usage error) and code is its exit code.
func (f *runFilters) query(inv *invocation, q url.Values) (code int, ok bool) {
	if *f.isBaseline {
		q.Set("isBaseline", "true")
	}
	for _, p := range []struct{ key, v string }{{"tag", *f.tag}, {"name", *f.name}, {"note", *f.note}, {"sweep", *f.sweep}, {"rerunOf", *f.rerunOf}} {
		if p.v != "" {
			q.Set(p.key, p.v)
		}
	}
	for _, kv := range f.params {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return inv.usageError("--param wants KEY=VALUE, got %q", kv), false
		}
		q.Add("param."+k, v)
	}
	for _, p := range []struct{ flag, key, v string }{{"since", "createdAfter", *f.since}, {"until", "createdBefore", *f.until}} {
		if !f.fs.isSet(p.flag) {
			continue
		}
		t, err := parseWhen(p.v, inv.env.now())
		if err != nil {
			return inv.usageError("--%s: %v", p.flag, err), false
		}
		q.Set(p.key, t.UTC().Format(time.RFC3339Nano))
	}
	if *f.status != "" {
		s := core.Status(strings.ToUpper(*f.status))
		if !s.Valid() {
			return inv.usageError("unknown --status %q: use QUEUED, DISPATCHED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT or LOST", *f.status), false
		}
		q.Set("status", string(s))
	}
	if *f.user != "" {
		q.Set("user", *f.user)
	}
	if *f.project != "" {
		q.Set("project", *f.project)
	}
	return ExitOK, true
}

func runCancel(inv *invocation, args []string) int {
	inv.newFlags()
	id, c, code, ok := inv.startOn(args, inv.runID)
	if !ok {
		return code
	}
	var t core.Task
	if _, err := c.postJSON(inv.ctx, taskPath(id, "/cancel"), nil, &t); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == 409 {
			ae.Hint = fmt.Sprintf("`rlsched show %s` shows how it ended", id)
		}
		return inv.fail(err)
	}
	if !t.Status.Terminal() {
		// The answer is the run as the cancel found it (RUNNING): what the
		// command did is start its stop.
		fmt.Fprintln(inv.env.Stdout, "CANCELLING")
		fmt.Fprintf(inv.env.Stderr, "cancellation requested: the worker stops the run; `rlsched show %s` tells when it ended\n", id)
		return ExitOK
	}
	fmt.Fprintln(inv.env.Stdout, t.Status)
	return ExitOK
}

func runRerun(inv *invocation, args []string) int {
	fs := inv.newFlags()
	var params multiFlag
	var w waitFlags
	var resumeFrom string
	fs.Var(&params, "param", "change hyperparameter `KEY=VALUE` (repeatable; numbers and booleans are typed)")
	fs.StringVar(&resumeFrom, "resume-from", "", "start with the output files of run `RUN` in RLSCHED_OUTPUT_DIR, and RLSCHED_RESUME=1")
	var codeDir string
	fs.StringVar(&codeDir, "code", "", "run a new snapshot of the tree of `DIR` (e.g. .) instead of the original run's")
	inv.addWaitFlags(&w)
	p, code, ok := inv.start(args, 1, 1)
	if !ok {
		return code
	}
	if fs.isSet("resume-from") && !core.ValidTaskID(resumeFrom) {
		return inv.usageError("invalid --resume-from %q: give the id of the run whose files to start from", resumeFrom)
	}
	if code, ok := inv.checkWaitFlags(&w); !ok {
		return code
	}
	id, code, ok := inv.runID(p)
	if !ok {
		return code
	}
	if _, err := parseParams(params, nil); err != nil {
		return inv.usageError("%v", err)
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	body := map[string]any{}
	if len(params) > 0 {
		// The body replaces fields whole: merge into the original params so
		// that --param changes only the keys given.
		orig, _, err := c.getTask(inv.ctx, id)
		if err != nil {
			return inv.fail(err)
		}
		base := map[string]any{}
		if t := bytes.TrimSpace(orig.Params); len(t) > 0 && string(t) != "null" {
			dec := json.NewDecoder(bytes.NewReader(t))
			dec.UseNumber()
			if err := dec.Decode(&base); err != nil {
				return inv.fail(fmt.Errorf("cannot merge params: run %s has params that are not a JSON object: %s", id, fitWidth(string(t), 100)))
			}
		}
		merged, _ := parseParams(params, base)
		body["params"] = merged
	}
	if resumeFrom != "" {
		body["resumeFrom"] = resumeFrom
	}
	if codeDir != "" {
		rf := runFlags{codeDir: codeDir}
		dir := rf.codeSource(inv)
		req := submitRequest{Code: gitCode(inv.ctx, dir)}
		fitDiff(&req)
		code, err := inv.snapshotCode(c, dir, req.Code)
		if err != nil {
			return inv.fail(err)
		}
		body["code"] = code
	}
	var ans submitAnswer
	raw, err := c.postJSON(inv.ctx, taskPath(id, "/rerun"), body, &ans)
	if err != nil {
		return inv.fail(err)
	}
	return inv.submitted(c, ans, raw, w)
}

func runMetrics(inv *invocation, args []string) int {
	fs := inv.newFlags()
	names := fs.String("names", "", "only the series `a,b` (default all)")
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	times := fs.Bool("times", false, "add each point's time_unix_ms (when it was logged; empty when not known)")
	_, id, code, ok := inv.startID(args, 1, inv.runID)
	if !ok {
		return code
	}
	var want []string
	for _, n := range strings.Split(*names, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want = append(want, n)
		}
	}
	q := url.Values{}
	if len(want) > 0 {
		q.Set("names", strings.Join(want, ","))
	}
	header := "step,value"
	if *times {
		q.Set("times", "true")
		header += ",time_unix_ms"
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var ans struct {
		Series map[string][][]json.RawMessage `json:"series"`
	}
	raw, err := c.getJSON(inv.ctx, taskPath(id, "/metrics"), q, &ans)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	// Requested order first, then the rest by name.
	var order []string
	for _, n := range want {
		if _, ok := ans.Series[n]; ok && !contains(order, n) {
			order = append(order, n)
		}
	}
	var rest []string
	for n := range ans.Series {
		if !contains(order, n) {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	order = append(order, rest...)
	var b bytes.Buffer
	for i, n := range order {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "# %s\n%s\n", n, header)
		for _, pt := range ans.Series[n] {
			if len(pt) < 2 {
				continue
			}
			fmt.Fprintf(&b, "%s,%s", csvNumber(pt[0]), csvNumber(pt[1]))
			if *times {
				t := ""
				if len(pt) > 2 {
					t = csvNumber(pt[2])
				}
				b.WriteString("," + t)
			}
			b.WriteByte('\n')
		}
	}
	if _, err := inv.env.Stdout.Write(b.Bytes()); err != nil {
		return inv.fail(err)
	}
	for _, n := range want {
		if _, ok := ans.Series[n]; !ok {
			fmt.Fprintf(inv.env.Stderr, "no series %q for run %s\n", n, id)
		}
	}
	if len(ans.Series) == 0 && len(want) == 0 {
		fmt.Fprintf(inv.env.Stderr, "run %s has no metrics yet (a run reports them with lines like RLSCHED_METRIC {\"step\": 1, \"episode_reward\": 10})\n", id)
	}
	return ExitOK
}

// csvNumber prints a JSON number as written; null is empty, a string (such as
// "NaN") is unquoted.
func csvNumber(raw json.RawMessage) string {
	t := strings.TrimSpace(string(raw))
	if t == "null" {
		return ""
	}
	var s string
	if strings.HasPrefix(t, `"`) && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return t
}

// lsCSV prints the runs of q as CSV: one page, or with all every page (the
// next page's cursor is the answer's X-Next-Cursor header; the header row
// is printed once).
func (inv *invocation) lsCSV(c *client, q url.Values, all bool) int {
	q.Set("format", "csv")
	seen := map[string]bool{}
	for page := 0; ; page++ {
		resp, err := c.do(inv.ctx, "GET", "/api/tasks", q, nil, "text/csv")
		if err != nil {
			return inv.fail(err)
		}
		body := resp.body
		if page > 0 {
			if i := bytes.IndexByte(body, '\n'); i >= 0 {
				body = body[i+1:]
			}
		}
		if _, err := inv.rawStdout.Write(body); err != nil {
			return inv.fail(err)
		}
		next := resp.header.Get("X-Next-Cursor")
		if next == "" {
			return ExitOK
		}
		if !all {
			fmt.Fprintf(inv.env.Stderr, "(more runs: add --all, or --limit N)\n")
			return ExitOK
		}
		if seen[next] {
			return inv.fail(errors.New("the server keeps answering the same page: stopping --all (a server bug; try without --all)"))
		}
		seen[next] = true
		q.Set("cursor", next)
	}
}

// parseWhen reads --since and --until: an RFC 3339 time, a date (UTC
// midnight) or an age before now (90m, 36h, 7d).
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.ParseFloat(n, 64); err == nil && days >= 0 {
			return now.Add(-time.Duration(days * 24 * float64(time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: give 2025-03-01T12:00:00Z, 2025-03-01 or an age like 90m, 36h, 7d", s)
}

// codeTreeLine is a run's snapshot for show: its tree and where it starts.
func codeTreeLine(c core.CodeInfo) string {
	switch {
	case c.Tree == "":
		return "- (no snapshot: runs in workdir)"
	case c.Subdir != "":
		return c.Tree + " (in " + c.Subdir + "/)"
	}
	return c.Tree
}
