package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rlsched/rlsched/sweep"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

// sweepCommands are the subcommands of `rlsched sweep`; without one, the
// arguments describe a sweep to submit.
var sweepCommands = map[string]*command{}

func init() {
	register(&command{
		name: "sweep",
		args: "[flags] (--grid K=V,V... | --random K=DIST:MIN:MAX --samples N | --seeds N) " +
			"(--algorithm A [--episodes N] [--lr X] | -- COMMAND [ARG...])\n" +
			"       rlsched sweep (ls | show ID | retry ID | cancel ID) [flags]",
		summary: "Submit a sweep of runs over params and seeds (POST /api/sweeps); list, show, retry, cancel sweeps.",
		details: `A sweep is one submission whose members are ordinary runs: one for each cell of the
grid (every combination of the --grid values) and random sample, times each seed. A member's
params are the --param values, its cell and {"seed": s}; its runs are tagged sweep:ID.

--grid KEY=V1,V2,... gives KEY's values (repeatable; typed as --param values are).
--random KEY=DIST:MIN:MAX draws KEY from uniform, loguniform or int (both bounds included), or
KEY=choice:A,B,C from the values; --samples N draws N points (reproducibly: --random-seed S).
--seeds N runs each cell with seeds 0..N-1 (so does --seed-count N); --seeds 3,7,11 with those.
--max-parallel N lets at most N members run at once.
--method tpe --budget N searches --random's space (and the --grid axes as choices) by TPE:
the first proposals at once, each next one as earlier ones end, never more than --max-parallel
members running; --early-stop asha (--min-steps S or --rungs S1,S2,..., --reduction-factor η)
or --early-stop median stops members below a rung's cut (CANCELLED, reason early_stopped).

Only the sweep's id is printed on standard output. With --wait a progress line
(done/running/queued/failed) goes to standard error, then the groups: the exit code is 0
only when every member SUCCEEDED.

  rlsched sweep ls [--user U] [--limit N] [--json]
  rlsched sweep show ID [--json | --csv]   the seed groups: mean ± std of the final reward
  rlsched sweep show ID --heatmap X,Y      ... and their mean over params X and Y
  rlsched sweep retry ID [--wait]          rerun the members that FAILED, were CANCELLED or TIMEOUT
  rlsched sweep cancel ID                  cancel the members still queued or running`,
		examples: []string{
			"rlsched sweep --grid lr=3e-4,1e-3 --seeds 5 --algorithm PPO --episodes 300",
			"rlsched sweep --method tpe --budget 60 --max-parallel 6 --random lr=loguniform:1e-5:1e-2 --early-stop asha --min-steps 1000 -- python3 train.py",
			"rlsched sweep --random lr=loguniform:1e-5:1e-2 --samples 8 --seed-count 3 --max-parallel 4 -- python3 train.py",
			"rlsched sweep show $id",
			"rlsched sweep retry $id --wait",
		},
		argv: true,
		run:  runSweep,
	})
	for _, c := range []*command{
		{name: "sweep ls", args: "[--user U] [--limit N] [--json]", summary: "List sweeps, newest first, with their members' counts.", run: runSweepLs},
		{name: "sweep show", args: "ID [--json | --csv | --heatmap X,Y]", summary: "Show a sweep's seed groups: the final reward's mean ± std, n, min, max and the members' statuses.",
			details: "A group is the members whose params are equal but for the seed; each member counts with its latest run.\n" +
				"The table is the text form of the dashboard's parallel coordinates (a row per line); --heatmap X,Y adds its heatmap:\n" +
				"the groups' mean final reward at each pair of X and Y values, a drawn param cut into 6 ranges (log ones on a log scale).\n" +
				"A search or early-stopping sweep adds the best params with their interval, the importances and why members stopped.", run: runSweepShow},
		{name: "sweep retry", args: "ID [--wait] [--json]", summary: "Rerun every member whose latest run FAILED, was CANCELLED or TIMEOUT; print the new runs' ids.",
			details: "Members that SUCCEEDED or are still queued or running are left alone, so a second retry reruns nothing.", run: runSweepRetry},
		{name: "sweep cancel", args: "ID", summary: "Cancel every member of a sweep still queued or running; print their ids.", run: runSweepCancel},
	} {
		sweepCommands[strings.TrimPrefix(c.name, "sweep ")] = c
	}
}

func runSweep(inv *invocation, args []string) int {
	if len(args) > 0 {
		if sub := sweepCommands[args[0]]; sub != nil {
			inv.cmd = sub
			return sub.run(inv, args[1:])
		}
	}
	return runSweepCreate(inv, args)
}

// sweepRequest is POST /api/sweeps' body.
type sweepRequest struct {
	Name        string                   `json:"name,omitempty"`
	Project     string                   `json:"project,omitempty"`
	Base        submitRequest            `json:"base"`
	Grid        map[string][]any         `json:"grid,omitempty"`
	Random      map[string]randomRequest `json:"random,omitempty"`
	Samples     int                      `json:"samples,omitempty"`
	Seeds       []int64                  `json:"seeds,omitempty"`
	SeedCount   int                      `json:"seedCount,omitempty"`
	MaxParallel int                      `json:"maxParallel,omitempty"`
	RandomSeed  *int64                   `json:"randomSeed,omitempty"`
	Method      string                   `json:"method,omitempty"`
	Metric      string                   `json:"metric,omitempty"`
	Goal        string                   `json:"goal,omitempty"`
	Budget      int                      `json:"budget,omitempty"`
	EarlyStop   *earlyStopRequest        `json:"earlyStop,omitempty"`
}

// earlyStopRequest is a sweep's earlyStop; the server checks it and names
// the field of a bad one.
type earlyStopRequest struct {
	Method          string  `json:"method"`
	MinSteps        int64   `json:"minSteps,omitempty"`
	ReductionFactor int     `json:"reductionFactor,omitempty"`
	Rungs           []int64 `json:"rungs,omitempty"`
}

type randomRequest struct {
	Dist   string `json:"dist"`
	Min    any    `json:"min,omitempty"`
	Max    any    `json:"max,omitempty"`
	Values []any  `json:"values,omitempty"`
}

func runSweepCreate(inv *invocation, args []string) int {
	fs := inv.newFlags()
	var (
		rf                           runFlags
		grid, random                 multiFlag
		seeds                        string
		samples, seedCount, parallel int
		randomSeed                   int64
		wait, jsonOut                bool
		method, metric, goal, early  string
		rungs                        string
		budget, reduction            int
		minSteps                     int64
	)
	rf.define(fs)
	fs.Var(&grid, "grid", "grid values `KEY=V1,V2,...` (repeatable): a member for every combination")
	fs.Var(&random, "random", "draw `KEY=DIST:MIN:MAX` (uniform, loguniform, int) or KEY=choice:A,B,C (repeatable)")
	fs.IntVar(&samples, "samples", 0, "`N` random samples (with --random)")
	fs.Int64Var(&randomSeed, "random-seed", 0, "seed `S` of the random draws (default derived from --random and --samples)")
	fs.StringVar(&seeds, "seeds", "", "`N` seeds (0..N-1) per cell, or the seeds themselves: 3,7,11")
	fs.IntVar(&seedCount, "seed-count", 0, "`N` seeds (0..N-1) per cell")
	fs.IntVar(&parallel, "max-parallel", 0, "at most `N` members running at once (default no cap)")
	fs.StringVar(&method, "method", "", "how members are chosen: `grid`, random or tpe (default grid, or random with --random)")
	fs.IntVar(&budget, "budget", 0, "`N` members in all (tpe: proposed as earlier ones end)")
	fs.StringVar(&metric, "metric", "", "the `METRIC` searched and judged (default episode_reward)")
	fs.StringVar(&goal, "goal", "", "`maximize` (the default) or minimize the metric")
	fs.StringVar(&early, "early-stop", "", "stop members below a rung's cut: `asha` (with --min-steps or --rungs) or median")
	fs.Int64Var(&minSteps, "min-steps", 0, "asha's first rung, or the median rule's grace, in `STEPS`")
	fs.StringVar(&rungs, "rungs", "", "asha's rungs as `STEPS,...`, increasing (instead of --min-steps)")
	fs.IntVar(&reduction, "reduction-factor", 0, "asha keeps the top 1/`N` of a rung (default 3)")
	fs.BoolVar(&wait, "wait", false, "wait for every member to end, showing progress; exit 0 only if all SUCCEEDED")
	fs.BoolVar(&jsonOut, "json", false, `print the server's answer ({"id","runs"}; with --wait the sweep's)`)
	p := fs.parse(args)
	if !p.help && p.problem == "" && len(p.pos) > 0 {
		return inv.usageError("unexpected argument %q: subcommands are ls, show, retry, cancel; a command to run goes after --", p.pos[0])
	}
	p, code, ok := inv.startParsed(p, 0, 0)
	if !ok {
		return code
	}
	base, code, ok := inv.request(fs, p, &rf)
	if !ok {
		return code
	}
	req := sweepRequest{Name: base.Name, Project: base.Project, Base: base, Samples: samples, MaxParallel: parallel,
		Method: method, Metric: metric, Goal: goal, Budget: budget}
	if early != "" {
		req.EarlyStop = &earlyStopRequest{Method: early, MinSteps: minSteps, ReductionFactor: reduction}
		for _, v := range strings.Split(rungs, ",") {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return inv.usageError("--rungs %q: %q is not a step", rungs, v)
			}
			req.EarlyStop.Rungs = append(req.EarlyStop.Rungs, n)
		}
	} else if fs.isSet("min-steps") || fs.isSet("rungs") || fs.isSet("reduction-factor") {
		return inv.usageError("--min-steps, --rungs and --reduction-factor go with --early-stop asha or median")
	}
	req.Base.Name, req.Base.Project = "", ""
	for _, g := range grid {
		k, vs, ok := strings.Cut(g, "=")
		if !ok || k == "" || vs == "" {
			return inv.usageError("--grid wants KEY=V1,V2,..., got %q", g)
		}
		if req.Grid == nil {
			req.Grid = map[string][]any{}
		}
		if _, dup := req.Grid[k]; dup {
			return inv.usageError("--grid %s is given twice: put all its values in one flag", k)
		}
		for _, v := range strings.Split(vs, ",") {
			req.Grid[k] = append(req.Grid[k], paramValue(v))
		}
	}
	for _, r := range random {
		k, spec, ok := strings.Cut(r, "=")
		rr, err := parseRandom(spec)
		if !ok || k == "" || err != nil {
			return inv.usageError("--random wants KEY=uniform:MIN:MAX, KEY=loguniform:MIN:MAX, KEY=int:MIN:MAX or KEY=choice:A,B,..., got %q", r)
		}
		if req.Random == nil {
			req.Random = map[string]randomRequest{}
		}
		req.Random[k] = rr
	}
	if fs.isSet("random-seed") {
		req.RandomSeed = &randomSeed
	}
	switch {
	case fs.isSet("seeds") && fs.isSet("seed-count"):
		return inv.usageError("give --seeds or --seed-count, not both")
	case fs.isSet("seed-count"):
		if seedCount < 1 {
			return inv.usageError("--seed-count must be positive")
		}
		req.SeedCount = seedCount
	case fs.isSet("seeds") && !strings.Contains(seeds, ","):
		n, err := strconv.Atoi(strings.TrimSpace(seeds))
		if err != nil || n < 1 {
			return inv.usageError("--seeds wants a count N (seeds 0..N-1) or a list 3,7,11, got %q", seeds)
		}
		req.SeedCount = n
	case fs.isSet("seeds"):
		for _, v := range strings.Split(seeds, ",") {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return inv.usageError("--seeds %q: %q is not an integer", seeds, v)
			}
			req.Seeds = append(req.Seeds, n)
		}
	}
	if req.Grid == nil && req.Random == nil && req.Seeds == nil && req.SeedCount == 0 && req.Method == "" {
		return inv.usageError("nothing to sweep: give --grid, --random with --samples, or --seeds")
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if err := inv.attachCode(c, &req.Base, &rf, fs); err != nil {
		return inv.fail(err)
	}
	var ans struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}
	raw, err := c.postJSON(inv.ctx, "/api/sweeps", req, &ans)
	if err != nil {
		return inv.fail(err)
	}
	if ans.ID == "" {
		return inv.fail(fmt.Errorf("the server accepted the sweep but sent no id: %s", fitWidth(string(raw), 200)))
	}
	if jsonOut && !wait {
		return inv.printJSON(raw)
	}
	if !jsonOut {
		fmt.Fprintln(inv.env.Stdout, ans.ID)
	}
	fmt.Fprintf(inv.env.Stderr, "sweep %s: %d runs queued; `rlsched sweep show %s` shows its groups\n", ans.ID, len(ans.Runs), ans.ID)
	if !wait {
		return ExitOK
	}
	return inv.waitSweep(c, ans.ID, jsonOut)
}

// parseRandom reads DIST:MIN:MAX or choice:A,B,C.
func parseRandom(s string) (randomRequest, error) {
	dist, rest, _ := strings.Cut(s, ":")
	if dist == "choice" {
		var vs []any
		for _, v := range strings.Split(rest, ",") {
			vs = append(vs, paramValue(v))
		}
		return randomRequest{Dist: dist, Values: vs}, nil
	}
	lo, hi, ok := strings.Cut(rest, ":")
	if !ok || (dist != "uniform" && dist != "loguniform" && dist != "int") {
		return randomRequest{}, errors.New("bad distribution")
	}
	for _, v := range []string{lo, hi} {
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return randomRequest{}, err
		}
	}
	return randomRequest{Dist: dist, Min: json.Number(lo), Max: json.Number(hi)}, nil
}

// sweepView is the part of GET /api/sweeps/{id} the CLI reads.
type sweepView struct {
	ID          string              `json:"id"`
	Name        string              `json:"name"`
	Project     string              `json:"project"`
	User        string              `json:"user"`
	Members     int                 `json:"members"`
	MaxParallel int                 `json:"maxParallel"`
	CreatedAt   time.Time           `json:"createdAt"`
	Counts      map[core.Status]int `json:"counts"`
	Method      string              `json:"method"`
	Metric      string              `json:"metric"`
	Budget      int                 `json:"budget"`
	Best        *struct {
		Params json.RawMessage `json:"params"`
		Value  *float64        `json:"value"`
		CI     []*float64      `json:"ci"`
		Runs   []string        `json:"runs"`
	} `json:"best"`
	Importance []struct {
		Param string   `json:"param"`
		Value *float64 `json:"value"`
	} `json:"importance"`
	Stops []struct {
		Run   string `json:"run"`
		Error string `json:"error"`
	} `json:"stops"`
	Unreported  []string `json:"unreported"`
	NoObjective []string `json:"noObjective"`
	Decisions   []struct {
		Rung int      `json:"rung"`
		Step int64    `json:"step"`
		Cut  *float64 `json:"cut"`
		Stop bool     `json:"stop"`
	} `json:"decisions"`
	Groups []sweepGroup `json:"groups"`
}

// sweepGroup is one of a sweep's seed groups.
type sweepGroup struct {
	Params      map[string]json.RawMessage `json:"params"`
	Runs        []string                   `json:"runs"`
	N           int                        `json:"n"`
	FinalReward *struct {
		Mean, Std, Min, Max *float64
	} `json:"finalReward"`
	Counts map[core.Status]int `json:"counts"`
}

func sweepPath(id, suffix string) string { return "/api/sweeps/" + url.PathEscape(id) + suffix }

// sweepID takes and checks the ID argument of a subcommand.
func (inv *invocation) sweepID(p parsed) (string, int, bool) {
	id := p.pos[0]
	if !core.ValidTaskID(id) {
		return "", inv.usageError("invalid sweep id %q: ids are 1–64 of A-Z a-z 0-9 _ -", id), false
	}
	return id, ExitOK, true
}

// progress is the counts of a sweep's members in four: done (SUCCEEDED),
// running (DISPATCHED, RUNNING), queued (QUEUED, LOST: requeued) and failed
// (FAILED, CANCELLED, TIMEOUT).
func progress(counts map[core.Status]int) (done, running, queued, failed int) {
	done = counts[core.StatusSucceeded]
	running = counts[core.StatusDispatched] + counts[core.StatusRunning]
	queued = counts[core.StatusQueued] + counts[core.StatusLost]
	failed = counts[core.StatusFailed] + counts[core.StatusCancelled] + counts[core.StatusTimeout]
	return
}

// waitSweep waits until no member of sweep id is queued or running, with a
// progress line, then shows the groups (on stderr; the sweep's JSON on
// stdout with jsonOut) and returns 0 only when every member SUCCEEDED.
func (inv *invocation) waitSweep(c *client, id string, jsonOut bool) int {
	start := inv.env.now()
	var sw sweepView
	q := url.Values{"runs": {"false"}}
	err := inv.poll(c, true, func() (string, bool, error) {
		// A fresh value each time: JSON decoded into the last answer would
		// merge its groups' count maps, adding up statuses members left.
		sw = sweepView{}
		if _, err := c.getJSON(inv.ctx, sweepPath(id, ""), q, &sw); err != nil {
			return "", false, err
		}
		done, running, queued, failed := progress(sw.Counts)
		line := fmt.Sprintf("sweep %s: %d/%d done · %d running · %d queued · %d failed", id, done, sw.Members, running, queued, failed)
		if inv.env.isTerminal(inv.rawStderr) {
			line += " " + clock(inv.env.now().Sub(start))
		}
		return line, running+queued == 0, nil
	})
	if err != nil {
		code := inv.fail(err)
		if interrupted(err) {
			fmt.Fprintf(inv.env.Stderr, "  stopped waiting; sweep %s goes on: `rlsched sweep show %s` shows it, `rlsched sweep cancel %s` stops it\n", id, id, id)
		}
		return code
	}
	done, _, _, failed := progress(sw.Counts)
	fmt.Fprintf(inv.env.Stderr, "sweep %s: %d of %d members SUCCEEDED, %d did not (%s)\n", id, done, sw.Members, failed, clock(inv.env.now().Sub(start)))
	sw = sweepView{}
	raw, err := c.getJSON(inv.ctx, sweepPath(id, ""), q, &sw)
	if err != nil {
		return inv.fail(err)
	}
	if jsonOut {
		if code := inv.printJSON(raw); code != ExitOK {
			return code
		}
	} else if _, err := inv.env.Stderr.Write(groupsTable(sw)); err != nil {
		return inv.fail(err)
	}
	if failed > 0 {
		fmt.Fprintf(inv.env.Stderr, "  `rlsched sweep retry %s` reruns the members that did not succeed\n", id)
		return ExitError
	}
	return ExitOK
}

// groupsTable is a sweep's groups as a table: a column per param, then the
// final reward's mean ± std, n, min and max, and the members' statuses.
func groupsTable(sw sweepView) []byte {
	names := groupParams(sw)
	head := append(slices.Clone(names), "REWARD (MEAN ± STD)", "N", "MIN", "MAX", "RUNS")
	for i, h := range head[:len(names)] {
		head[i] = strings.ToUpper(h)
	}
	t := newTable(head...)
	for _, g := range sw.Groups {
		var cells []string
		for _, k := range names {
			v, ok := g.Params[k]
			cells = append(cells, orDash(fitWidth(paramText(v, ok), 30)))
		}
		reward, lo, hi := "-", "-", "-"
		if f := g.FinalReward; f != nil && f.Mean != nil {
			reward = fmt.Sprintf("%s ± %s", formatFloat(f.Mean, true), formatFloat(f.Std, true))
			lo, hi = formatFloat(f.Min, true), formatFloat(f.Max, true)
		}
		cells = append(cells, reward, strconv.Itoa(g.N), lo, hi, statusCounts(g.Counts))
		t.row(cells...)
	}
	return t.bytes()
}

// groupParams are the names of the params of sw's groups, sorted.
func groupParams(sw sweepView) []string {
	keys := map[string]bool{}
	for _, g := range sw.Groups {
		for k := range g.Params {
			keys[k] = true
		}
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// searchLines say what a sweep's search found: the best params with the
// IQM of their seeds and its interval, the params' importances, and why
// each member stopped early (and which never reported the metric).
func searchLines(sw sweepView) []byte {
	var b bytes.Buffer
	if sw.Method == "tpe" {
		fmt.Fprintf(&b, "\ntpe search of %s: %d of %d members proposed\n", orDash(sw.Metric), sw.Members, sw.Budget)
	}
	if best := sw.Best; best != nil {
		ci := "-"
		if len(best.CI) == 2 {
			ci = "[" + formatFloat(best.CI[0], true) + ", " + formatFloat(best.CI[1], true) + "]"
		}
		fmt.Fprintf(&b, "\nbest %s: %s %s (runs %s)\n", orDash(sw.Metric), fitWidth(string(best.Params), 120),
			formatFloat(best.Value, true)+" "+ci, strings.Join(best.Runs, ", "))
	}
	if len(sw.Importance) > 0 {
		var parts []string
		for _, im := range sw.Importance {
			parts = append(parts, im.Param+" "+formatFloat(im.Value, true))
		}
		fmt.Fprintf(&b, "importance: %s\n", strings.Join(parts, ", "))
	}
	b.Write(rungLines(sw))
	if len(sw.Stops) > 0 {
		fmt.Fprintf(&b, "\nstopped early:\n")
		for _, st := range sw.Stops {
			fmt.Fprintf(&b, "  %s  %s\n", st.Run, st.Error)
		}
	}
	if len(sw.Unreported) > 0 {
		fmt.Fprintf(&b, "never reported the early-stopping metric (not stopped for it): %s\n", strings.Join(sw.Unreported, ", "))
	}
	if len(sw.NoObjective) > 0 {
		fmt.Fprintf(&b, "ended without reporting %s (no value, never best): %s\n", orDash(sw.Metric), strings.Join(sw.NoObjective, ", "))
		if sw.Best == nil {
			fmt.Fprintf(&b, "no member that ended reported %s: is it the name the runs log? (`rlsched metrics RUN` shows what a run logged)\n", orDash(sw.Metric))
		}
	}
	return b.Bytes()
}

// rungLines count each rung's kept decisions: how many members continued
// and stopped there, and the last cut (the bar the latest member met).
func rungLines(sw sweepView) []byte {
	var b bytes.Buffer
	for i := 0; i < len(sw.Decisions); {
		d := sw.Decisions[i]
		kept, stopped := 0, 0
		var cut *float64
		for ; i < len(sw.Decisions) && sw.Decisions[i].Rung == d.Rung; i++ {
			if sw.Decisions[i].Stop {
				stopped++
			} else {
				kept++
			}
			cut = sw.Decisions[i].Cut
		}
		if b.Len() == 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "rung %d (step %d): %d continued, %d stopped; last cut %s\n", d.Rung, d.Step, kept, stopped, formatFloat(cut, true))
	}
	return b.Bytes()
}

// paramText is a param value as the table shows it: a string as it is,
// anything else as its JSON.
func paramText(v json.RawMessage, ok bool) string {
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	return sweep.ShortNumber(v) // a random draw's 17 digits hide the table; the record keeps them
}

// statusCounts is "2 SUCCEEDED, 1 FAILED": the statuses present, in their
// life's order.
func statusCounts(counts map[core.Status]int) string {
	var parts []string
	for _, st := range core.Statuses() {
		if n := counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	return orDash(strings.Join(parts, ", "))
}

func runSweepShow(inv *invocation, args []string) int {
	fs := inv.newFlags()
	jsonOut := fs.Bool("json", false, "print the server's JSON (the sweep, its runs and groups)")
	csvOut := fs.Bool("csv", false, "print the groups as CSV (the server's ?format=csv)")
	heat := fs.String("heatmap", "", "X,Y: also print the mean final reward over params X and Y, ranges for a drawn param")
	p, code, ok := inv.start(args, 1, 1)
	if !ok {
		return code
	}
	if *jsonOut && *csvOut {
		return inv.usageError("give --json or --csv, not both")
	}
	var heatX, heatY string
	if *heat != "" {
		x, y, ok := strings.Cut(*heat, ",")
		if !ok || x == "" || y == "" || x == y || strings.Contains(y, ",") {
			return inv.usageError("--heatmap takes two different params, X,Y (e.g. --heatmap lr,gamma)")
		}
		if *jsonOut || *csvOut {
			return inv.usageError("--heatmap prints a table; drop --json and --csv")
		}
		heatX, heatY = x, y
	}
	id, code, ok := inv.sweepID(p)
	if !ok {
		return code
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if *csvOut {
		resp, err := c.do(inv.ctx, "GET", sweepPath(id, ""), url.Values{"format": {"csv"}}, nil, "text/csv")
		if err != nil {
			return inv.fail(err)
		}
		if _, err := inv.rawStdout.Write(resp.body); err != nil {
			return inv.fail(err)
		}
		return ExitOK
	}
	var sw sweepView
	q := url.Values{}
	if !*jsonOut {
		q.Set("runs", "false")
	}
	raw, err := c.getJSON(inv.ctx, sweepPath(id, ""), q, &sw)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	done, running, queued, failed := progress(sw.Counts)
	var b bytes.Buffer
	fmt.Fprintf(&b, "sweep %s %s by %s", sw.ID, orDash(sw.Name), sw.User)
	if sw.Project != "" {
		fmt.Fprintf(&b, " in %s", sw.Project)
	}
	fmt.Fprintf(&b, ", %d members", sw.Members)
	if sw.MaxParallel > 0 {
		fmt.Fprintf(&b, " (at most %d at once)", sw.MaxParallel)
	}
	// A member stopped early is CANCELLED, but did not fail.
	stopped := len(sw.Stops)
	fmt.Fprintf(&b, ": %d done, %d running, %d queued, %d failed", done, running, queued, failed-stopped)
	if stopped > 0 {
		fmt.Fprintf(&b, ", %d stopped early", stopped)
	}
	b.WriteString("\n\n")
	b.Write(groupsTable(sw))
	if heatX != "" {
		for _, k := range []string{heatX, heatY} {
			if !slices.ContainsFunc(sw.Groups, func(g sweepGroup) bool { _, ok := g.Params[k]; return ok }) {
				return inv.usageError("--heatmap: no group of sweep %s has param %q; its params: %s", id, k, strings.Join(groupParams(sw), ", "))
			}
		}
		b.Write(heatmapLines(sw, heatX, heatY))
	}
	b.Write(searchLines(sw))
	if _, err := inv.env.Stdout.Write(b.Bytes()); err != nil {
		return inv.fail(err)
	}
	return ExitOK
}

func runSweepLs(inv *invocation, args []string) int {
	fs := inv.newFlags()
	user := fs.String("user", "", "only sweeps of `USER`")
	limit := fs.Int("limit", 0, "at most `N` sweeps (1–500)")
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	q := url.Values{}
	if *user != "" {
		q.Set("user", *user)
	}
	if fs.isSet("limit") {
		if *limit < 1 || *limit > 500 {
			return inv.usageError("--limit must be 1–500")
		}
		q.Set("limit", strconv.Itoa(*limit))
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var page struct {
		Items      []sweepView `json:"items"`
		NextCursor string      `json:"nextCursor"`
	}
	raw, err := c.getJSON(inv.ctx, "/api/sweeps", q, &page)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	now := inv.env.now()
	t := newTable("ID", "NAME", "USER", "MEMBERS", "DONE", "RUNNING", "QUEUED", "FAILED", "CREATED")
	for _, sw := range page.Items {
		done, running, queued, failed := progress(sw.Counts)
		t.rowf("%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", sw.ID, orDash(fitWidth(sw.Name, 40)), orDash(sw.User),
			sw.Members, done, running, queued, failed, age(now, sw.CreatedAt))
	}
	if err := inv.printTable(t); err != nil {
		return inv.fail(err)
	}
	if page.NextCursor != "" {
		fmt.Fprintf(inv.env.Stderr, "(more sweeps: add --limit N)\n")
	}
	return ExitOK
}

func runSweepRetry(inv *invocation, args []string) int {
	fs := inv.newFlags()
	wait := fs.Bool("wait", false, "wait for the whole sweep to end, showing progress; exit 0 only if all SUCCEEDED")
	jsonOut := fs.Bool("json", false, `print the server's answer ({"runs"}; with --wait the sweep's)`)
	id, c, code, ok := inv.startOn(args, inv.sweepID)
	if !ok {
		return code
	}
	var ans struct {
		Runs []string `json:"runs"`
	}
	raw, err := c.postJSON(inv.ctx, sweepPath(id, "/retry"), nil, &ans)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut && !*wait {
		return inv.printJSON(raw)
	}
	if !*jsonOut {
		for _, r := range ans.Runs {
			fmt.Fprintln(inv.env.Stdout, r)
		}
	}
	if len(ans.Runs) == 0 {
		fmt.Fprintf(inv.env.Stderr, "sweep %s: no member to retry (none FAILED, was CANCELLED or TIMEOUT)\n", id)
	} else {
		fmt.Fprintf(inv.env.Stderr, "sweep %s: %d members rerun\n", id, len(ans.Runs))
	}
	if !*wait {
		return ExitOK
	}
	return inv.waitSweep(c, id, *jsonOut)
}

func runSweepCancel(inv *invocation, args []string) int {
	inv.newFlags()
	id, c, code, ok := inv.startOn(args, inv.sweepID)
	if !ok {
		return code
	}
	var ans struct {
		Runs []string `json:"runs"`
	}
	if _, err := c.postJSON(inv.ctx, sweepPath(id, "/cancel"), nil, &ans); err != nil {
		return inv.fail(err)
	}
	for _, r := range ans.Runs {
		fmt.Fprintln(inv.env.Stdout, r)
	}
	fmt.Fprintf(inv.env.Stderr, "sweep %s: cancel requested for %d members; running ones stop when their workers report\n", id, len(ans.Runs))
	return ExitOK
}
