package cli

import (
	"cmp"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

func init() {
	register(&command{
		name: "compare",
		args: "(--sweep ID | --ids A,B,... | filters) [--by param.K[,param.K]] [--task param.K|tag.K] [--metric NAME] " +
			"[--stat iqm,mean,median,gap] [--reps N] [--ci C] [--seed S] [--profile T,T,...] [--improve A:B] [--json]",
		summary: "Compare groups of runs as an RL paper does: IQM, mean, median, optimality gap with bootstrap intervals (GET /api/compare).",
		details: `The runs are --ids, or --sweep ID alone (each member's latest run), or those the ls filters
find (--tag, --project, --param K=V, ...; --sweep with another filter: every run of the sweep).
--by groups them by params (default: every param but the seed); --task names the param that is
each run's task (environment), or tag.K the tag K:VALUE whose VALUE is: scores are resampled within each task (a stratified bootstrap,
--reps times, --seed for repeatability), and IQM pools every task's runs. A run's score is its
--metric's last value, or the mean of its last --window points; runs whose score is NaN or ±Inf
are skipped and counted.

--normalize minmax --min X --max Y maps scores to (s-X)/(Y-X), X and Y each one number or one per
task (--min cartpole=0,pendulum=-1600); --normalize baseline --baseline G maps each task's lowest
score (or --min) to 0 and group G's mean to 1. --profile prints the fraction of each group's runs
above each τ; --improve A:B the probability that a run of group A beats one of group B (ties
count one half), --improve all the matrix of every pair. Groups are named by their params'
values, joined by commas, as the GROUP column shows them. --json prints the server's answer.`,
		examples: []string{
			"rlsched compare --sweep $id --by param.lr --task param.env --metric episode_reward --stat iqm",
			"rlsched compare --tag baseline --by param.algo --improve PPO:DQN --profile 100,200,300",
			"rlsched compare --sweep $id --by param.lr --normalize minmax --min -1600 --max 0 --json | jq .groups[0].stats.iqm",
		},
		run: runCompare,
	})
}

// compareAnswer is the part of GET /api/compare's answer the table shows.
type compareAnswer struct {
	Metric  string   `json:"metric"`
	Reps    int      `json:"reps"`
	CI      float64  `json:"ci"`
	Tasks   []string `json:"tasks"`
	Runs    int      `json:"runs"`
	Missing int      `json:"missing"`
	Skipped int      `json:"skipped"`
	Groups  []struct {
		Name    string                     `json:"name"`
		N       int                        `json:"n"`
		Skipped int                        `json:"skipped"`
		Stats   map[string]compareInterval `json:"stats"`
		Profile [][4]*float64              `json:"profile"`
	} `json:"groups"`
	Improvement  *compareImprovement  `json:"improvement"`
	Improvements []compareImprovement `json:"improvements"`
}

type compareImprovement struct {
	A string `json:"a"`
	B string `json:"b"`
	compareInterval
}

type compareInterval struct {
	Value *float64    `json:"value"`
	CI    [2]*float64 `json:"ci"`
}

func (iv compareInterval) String() string {
	return fmt.Sprintf("%s [%s, %s]", formatFloat(iv.Value, true), formatFloat(iv.CI[0], true), formatFloat(iv.CI[1], true))
}

// paramFlag is a --by or --task value as the server wants it: param.K
// (K alone is taken for param.K), or a task's tag.K.
func paramFlag(v string) string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, "param.") && !strings.HasPrefix(p, "tag.") {
			p = "param." + p
		}
		out = append(out, p)
	}
	return strings.Join(out, ",")
}

func runCompare(inv *invocation, args []string) int {
	fs := inv.newFlags()
	filters := addRunFilters(fs)
	ids := fs.String("ids", "", "compare these runs: `IDS` separated by commas")
	by := fs.String("by", "", "group by these `param.K[,param.K]` (K alone is param.K; default: every param but the seed)")
	task := fs.String("task", "", "the param `param.K` that names each run's task (environment)")
	metric := fs.String("metric", "", "the series scored (`NAME`; default episode_reward)")
	window := fs.Int("window", 0, "a run's score: the mean of its last `K` points (default 1: the final value)")
	stat := fs.String("stat", "", "the aggregates, `LIST` of iqm, mean, median, gap (default all four)")
	reps := fs.Int("reps", 0, "bootstrap replicates (`N`, 1–50000; default 2000)")
	ci := fs.Float64("ci", 0, "the intervals' coverage (`C`, default 0.95)")
	seed := fs.Uint64("seed", 0, "the bootstrap's `SEED`: the same seed, the same intervals")
	normalize := fs.String("normalize", "", "`HOW` scores are normalised: none, minmax (--min, --max) or baseline (--baseline)")
	lo := fs.String("min", "", "normalisation: the score `X` mapped to 0 (or TASK=X,TASK=X,... per task)")
	hi := fs.String("max", "", "normalisation: the score `Y` mapped to 1 (or TASK=Y,TASK=Y,... per task)")
	baseline := fs.String("baseline", "", "normalize=baseline: the `GROUP` whose mean maps to 1")
	profile := fs.String("profile", "", "the performance profile at `τ,τ,...`: the fraction of runs above each")
	improve := fs.String("improve", "", "the probability of improvement of group A over group B, `A:B`; or all: the matrix of every pair (at most 20 groups)")
	jsonOut := fs.Bool("json", false, "print the server's JSON")
	if _, code, ok := inv.start(args, 0, 0); !ok {
		return code
	}
	q := url.Values{}
	if code, ok := filters.query(inv, q); !ok {
		return code
	}
	for _, f := range []struct{ key, v string }{{"ids", *ids}, {"by", paramFlag(*by)}, {"task", paramFlag(*task)},
		{"metric", *metric}, {"stat", *stat}, {"normalize", *normalize}, {"baseline", *baseline},
		{"profile", *profile}, {"improve", *improve}} {
		if f.v != "" {
			q.Set(f.key, f.v)
		}
	}
	for _, f := range []struct {
		flag, key string
		v         string
	}{{"window", "window", strconv.Itoa(*window)}, {"reps", "reps", strconv.Itoa(*reps)},
		{"ci", "ci", strconv.FormatFloat(*ci, 'g', -1, 64)}, {"seed", "seed", strconv.FormatUint(*seed, 10)},
		{"min", "min", *lo}, {"max", "max", *hi}} {
		if fs.isSet(f.flag) {
			q.Set(f.key, f.v)
		}
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	var a compareAnswer
	raw, err := c.getJSON(inv.ctx, "/api/compare", q, &a)
	if err != nil {
		return inv.fail(err)
	}
	if *jsonOut {
		return inv.printJSON(raw)
	}
	return inv.printCompare(&a)
}

// printCompare writes the aggregates table, then the profile and the
// improvement when asked for.
func (inv *invocation) printCompare(a *compareAnswer) int {
	var stats []string
	if len(a.Groups) > 0 {
		for st := range a.Groups[0].Stats {
			stats = append(stats, st)
		}
	}
	order := map[string]int{"iqm": 0, "mean": 1, "median": 2, "gap": 3}
	sort.Slice(stats, func(i, j int) bool { return order[stats[i]] < order[stats[j]] })
	cols := []string{"GROUP", "N"}
	for _, st := range stats {
		cols = append(cols, strings.ToUpper(st))
	}
	tb := newTable(append(cols, "SKIPPED")...)
	for _, g := range a.Groups {
		row := []string{orDash(g.Name), strconv.Itoa(g.N)}
		for _, st := range stats {
			row = append(row, g.Stats[st].String())
		}
		tb.row(append(row, strconv.Itoa(g.Skipped))...)
	}
	fmt.Fprintf(inv.env.Stdout, "%s: %d runs", a.Metric, a.Runs)
	if len(a.Tasks) > 0 {
		fmt.Fprintf(inv.env.Stdout, " over %d tasks (%s)", len(a.Tasks), strings.Join(a.Tasks, ", "))
	}
	fmt.Fprintf(inv.env.Stdout, ", %d without the metric, %d skipped (NaN or ±Inf); %g%% intervals, %d bootstrap reps\n",
		a.Missing, a.Skipped, a.CI*100, a.Reps)
	if err := inv.printTable(tb); err != nil {
		return inv.fail(err)
	}
	if len(a.Groups) > 0 && len(a.Groups[0].Profile) > 0 {
		pt := newTable("GROUP", "τ", "FRACTION ABOVE")
		for _, g := range a.Groups {
			for _, p := range g.Profile {
				iv := compareInterval{p[1], [2]*float64{p[2], p[3]}}
				pt.row(orDash(g.Name), formatFloat(p[0], true), iv.String())
			}
		}
		fmt.Fprintln(inv.env.Stdout)
		if err := inv.printTable(pt); err != nil {
			return inv.fail(err)
		}
	}
	if im := a.Improvement; im != nil {
		fmt.Fprintf(inv.env.Stdout, "\nP(%s > %s) = %s\n", im.A, im.B, im.compareInterval)
	}
	if len(a.Improvements) > 0 {
		// The matrix: P(row > column), a row per group in the groups' order.
		names := make([]string, len(a.Groups))
		cell := map[[2]string]string{}
		for i, g := range a.Groups {
			names[i] = orDash(g.Name)
		}
		for _, im := range a.Improvements {
			cell[[2]string{orDash(im.A), orDash(im.B)}] = im.compareInterval.String()
		}
		mt := newTable(append([]string{"P(ROW > COLUMN)"}, names...)...)
		for _, r := range names {
			row := []string{r}
			for _, c := range names {
				row = append(row, cmp.Or(cell[[2]string{r, c}], "-"))
			}
			mt.row(row...)
		}
		fmt.Fprintln(inv.env.Stdout)
		if err := inv.printTable(mt); err != nil {
			return inv.fail(err)
		}
	}
	return ExitOK
}
