package main

import (
	_ "embed"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// table is one table of a scenario's report.
type table struct {
	title string
	cols  []string
	rows  [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// result is the machine-readable RESULT line.
type result struct {
	metric   string
	value    float64
	unit     string
	ref      string
	refValue float64
}

func (r result) ratio() float64 {
	if r.refValue == 0 {
		return 0
	}
	return r.value / r.refValue
}

func (r result) line(scenario string) string {
	return fmt.Sprintf("RESULT scenario=%s metric=%s value=%s unit=%s reference=%s reference_value=%s ratio=%s",
		scenario, r.metric, num(r.value), r.unit, r.ref, num(r.refValue), strconv.FormatFloat(r.ratio(), 'f', 4, 64))
}

// report is what a scenario measured.
type report struct {
	scenario scenario
	command  string
	elapsed  time.Duration
	size     string // e.g. "15,000 workers"
	tables   []*table
	goals    []string // "met"/"missed" lines
	notes    []string
	result   result
}

func (r *report) newTable(title string, cols ...string) *table {
	t := &table{title: title, cols: cols}
	r.tables = append(r.tables, t)
	return t
}

func (r *report) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *report) goal(met bool, format string, args ...any) {
	word := "MISSED"
	if met {
		word = "met"
	}
	r.goals = append(r.goals, word+": "+fmt.Sprintf(format, args...))
}

// print writes the report as text, the RESULT line last.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s (%s, %.0f s) — %s\n", r.scenario.name, r.size, r.elapsed.Seconds(), r.scenario.about)
	for _, t := range r.tables {
		fmt.Fprintf(w, "\n%s\n", t.title)
		writeTable(w, t)
	}
	for _, g := range r.goals {
		fmt.Fprintf(w, "goal %s\n", g)
	}
	for _, n := range r.notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "reproduce: %s\n", r.command)
	fmt.Fprintln(w, r.result.line(r.scenario.name))
}

func writeTable(w io.Writer, t *table) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.cols, " | "))
	seps := make([]string, len(t.cols))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintf(w, "| %s |\n", strings.Join(seps, " | "))
	for _, row := range t.rows {
		cells := append([]string(nil), row...)
		for len(cells) < len(t.cols) {
			cells = append(cells, "")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// writeMarkdown rewrites BENCHMARKS.md from the reports of -all.
func writeMarkdown(path string, e *env, reports []*report) error {
	m := describeMachine()
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `go run ./bench -all` (the Makefile's `bench` target); do not edit by hand.\n")
	fmt.Fprintf(&b, "Each scenario can be rerun alone with the command under its table (add `-quick` for a\n")
	fmt.Fprintf(&b, "small version in under 30 s, `-profile DIR` for pprof profiles of the master).\n\n")
	fmt.Fprintf(&b, "| machine | |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| CPU | %s, %d cores |\n| RAM | %s |\n| kernel | %s |\n| Go | %s |\n", m.CPU, m.Cores, mib(m.RAM), m.Kernel, m.GoVersion)
	fmt.Fprintf(&b, "| open files per process | %d |\n| ephemeral ports | %s |\n", m.FDLimit, m.PortRange)
	fmt.Fprintf(&b, "| date | %s |\n| total time | %.0f s |\n\n", e.began.UTC().Format("2006-01-02 15:04 MST"), time.Since(e.began).Seconds())
	b.WriteString(`## How to read this

The machine is shared with other work and has few cores, so absolute numbers move from run to
run. Every figure is therefore measured next to a reference in the same run, and the ratio is
what to compare across runs:

- **raw loopback TCP**: the harness's own gnet echo server and ping-pong client; what TCP on
  this machine costs with no protocol work at all;
- **naive master**: ` + "`bench/naive`" + `, a goroutine-per-connection ` + "`net.Conn`" + ` master speaking the same
  protocol (Challenge/Hello with the join-token proof, heartbeats, dispatch from an in-memory
  queue, nothing durable);
- **naive REST**: ` + "`net/http`" + ` plus the very same SQLite insert (` + "`store.CreateTask`" + `), without
  JWT, user lookup, validation or access log;
- **fork/exec** and **fsync** rates of the machine, measured by the harness.

The master under test is the production binary (` + "`go build ./cmd/rlsched`" + `) started as
` + "`rlsched master`" + ` in its own process with SQLite and in-memory leases; its CPU time comes
from /proc/PID/task/*/schedstat (the user/system split from /proc/PID/stat) and its memory from
/proc/PID/status (VmRSS, VmHWM). Simulated workers are
real TCP connections speaking the real protocol, multiplexed on gnet client event loops in
helper processes (at most 4,000 connections each, each process with its own 127.0.0.x source
address). Both the load and the master share the same cores, so the ratios are pessimistic for
the master. Latencies are measured by the simulated workers (heartbeat ack round trip) or
between the submitter's send and the worker's receipt of ExecuteTask, on the same wall clock.

Profiles: ` + "`go run ./bench -scenario NAME -profile DIR`" + ` builds the master with ` + "`bench/overlay`" + `
added through ` + "`go build -overlay`" + ` (cmd/ is untouched) and writes a CPU, heap and allocation
profile of the master for every measured window (` + "`go tool pprof -top DIR/<window>.cpu.pprof`" + `).

`)
	for _, r := range reports {
		fmt.Fprintf(&b, "## %s\n\n%s. Size: %s. Goal: %s.\n\n", r.scenario.name, capitalise(r.scenario.about), r.size, r.scenario.goal)
		for _, t := range r.tables {
			fmt.Fprintf(&b, "**%s**\n\n", t.title)
			writeTable(&b, t)
			b.WriteString("\n")
		}
		for _, g := range r.goals {
			fmt.Fprintf(&b, "- Goal %s\n", g)
		}
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		fmt.Fprintf(&b, "\nReproduce: `%s` (%.0f s). Last line:\n\n```\n%s\n```\n\n", r.command, r.elapsed.Seconds(), r.result.line(r.scenario.name))
	}
	b.WriteString(changes)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// changes is the record of what was changed for performance and what it
// measured before and after (numbers from their own A/B runs, kept here
// because every run of -all rewrites the tables above).
//
//go:embed changes.md
var changes string

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// num formats a number plainly (no thousands separators, no exponent).
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

// human formats a number for tables: 12,345 or 1.23.
func human(v float64) string {
	if math.Abs(v) >= 1000 {
		s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []byte
		for i := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		if neg {
			return "-" + string(out)
		}
		return string(out)
	}
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	if math.Abs(v) >= 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func mib(b int64) string {
	if b >= 10<<30 {
		return fmt.Sprintf("%.0f GiB", float64(b)/(1<<30))
	}
	if b >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= 100*time.Microsecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func ratioStr(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}

// median of xs (0 when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}
