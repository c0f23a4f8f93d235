package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ParsePolicy reads a policy spec: "rlsched" (the master's defaults),
// "fifo" (no fair share, quotas, reservations or preemption), "sjf"
// (fifo with shorter runs first, by their oracle durations), "tiresias"
// (fifo with Tiresias' 2D-LAS levels as priorities, every run
// preemptible, a cooldown of a second), "slurm" (fifo with Slurm's
// multifactor priority of age and fair share, OrderMultifactor, and
// backfill with reservations), or
// NAME:key=value,... starting from rlsched's defaults, with the keys
// halflife=DURATION, reserve=DURATION|off, preempt=DURATION|off (the
// cooldown), quota=N (the default GPU quota), fifo=true|false and
// order=trace|sjf|tiresias|multifactor. A
// preset's name may take keys too ("fifo:reserve=300s").
func ParsePolicy(spec string) (Policy, error) {
	name, kvs, _ := strings.Cut(strings.TrimSpace(spec), ":")
	if name == "" {
		return Policy{}, fmt.Errorf("bad policy %q: it needs a name (rlsched, fifo, or a name of yours with key=value settings)", spec)
	}
	p := Policy{Name: name}
	switch name {
	case "fifo":
		p.FIFO, p.BackfillReserve, p.PreemptCooldown = true, -1, -1
	case OrderSJF:
		p.FIFO, p.BackfillReserve, p.PreemptCooldown, p.Order = true, -1, -1, OrderSJF
	case OrderTiresias:
		p.FIFO, p.BackfillReserve, p.PreemptCooldown, p.Order = true, -1, time.Second, OrderTiresias
	case "slurm":
		p.FIFO, p.PreemptCooldown, p.Order = true, -1, OrderMultifactor
	}
	for _, kv := range strings.Split(kvs, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return p, fmt.Errorf("bad policy %q: %q is not key=value", spec, kv)
		}
		var err error
		switch k {
		case "halflife":
			p.HalfLife, err = positive(v)
		case "reserve":
			p.BackfillReserve, err = durationOrOff(v)
		case "preempt":
			p.PreemptCooldown, err = durationOrOff(v)
		case "quota":
			p.DefaultGPUQuota, err = strconv.Atoi(v)
			if err == nil && p.DefaultGPUQuota < 0 {
				err = fmt.Errorf("a quota is 0 (none) or more")
			}
		case "fifo":
			p.FIFO, err = strconv.ParseBool(v)
		case "order":
			switch v {
			case "trace":
				p.Order = ""
			case OrderSJF, OrderTiresias, OrderMultifactor:
				p.Order = v
			default:
				err = fmt.Errorf("%q is not trace, sjf, tiresias or multifactor", v)
			}
		default:
			return p, fmt.Errorf("bad policy %q: unknown key %q (halflife, reserve, preempt, quota, fifo, order)", spec, k)
		}
		if err != nil {
			return p, fmt.Errorf("bad policy %q: %s: %w", spec, k, err)
		}
	}
	return p, nil
}

func positive(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && d <= 0 {
		err = fmt.Errorf("%q is not positive", v)
	}
	return d, err
}

// durationOrOff is a knob's duration, or -1 for "off" (the master's < 0).
func durationOrOff(v string) (time.Duration, error) {
	if v == "off" {
		return -1, nil
	}
	return positive(v)
}

// WriteTable writes the summaries side by side, one column per policy.
func WriteTable(w io.Writer, ss []Summary) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	row := func(label string, f func(Summary) string) {
		fmt.Fprintf(tw, "%s\t", label)
		for _, s := range ss {
			fmt.Fprintf(tw, "%s\t", f(s))
		}
		fmt.Fprintln(tw)
	}
	dur := func(sec float64) string { return fmtDur(time.Duration(sec * float64(time.Second))) }
	row("policy", func(s Summary) string { return s.Policy })
	row("jobs finished", func(s Summary) string { return strconv.Itoa(s.Jobs) })
	row("jobs skipped", func(s Summary) string { return strconv.Itoa(s.Skipped) })
	row("JCT mean", func(s Summary) string { return dur(s.JCT.Mean) })
	row("JCT p50", func(s Summary) string { return dur(s.JCT.P50) })
	row("JCT p99", func(s Summary) string { return dur(s.JCT.P99) })
	row("wait mean", func(s Summary) string { return dur(s.Wait.Mean) })
	row("wait p50", func(s Summary) string { return dur(s.Wait.P50) })
	row("wait p99", func(s Summary) string { return dur(s.Wait.P99) })
	row("longest wait", func(s Summary) string { return dur(s.LongestWait) })
	row("slowdown mean", func(s Summary) string { return fmt.Sprintf("%.2f", s.Slowdown.Mean) })
	row("makespan", func(s Summary) string { return dur(s.Makespan) })
	row("GPU allocation", func(s Summary) string { return fmt.Sprintf("%.1f%%", 100*s.Allocation) })
	row("GPU utilisation", func(s Summary) string { return fmt.Sprintf("%.1f%%", 100*s.Utilisation) })
	row("preemptions", func(s Summary) string { return strconv.FormatInt(s.Preemptions, 10) })
	row("lost GPU-hours", func(s Summary) string { return fmt.Sprintf("%.1f", s.LostGPUHours) })
	row("user slowdown max/min", func(s Summary) string { return fmt.Sprintf("%.2f", s.Fairness) })
	row("finish-time fairness ρ max", func(s Summary) string { return fmt.Sprintf("%.2f", s.RhoMax) })
	row("finish-time fairness ρ mean", func(s Summary) string { return fmt.Sprintf("%.2f", s.RhoMean) })
	row("events", func(s Summary) string { return strconv.FormatInt(s.Events, 10) })
	row("planner passes", func(s Summary) string { return strconv.FormatInt(s.Passes, 10) })
	return tw.Flush()
}

// fmtDur is d rounded for a table: 1h23m, 4m05s, 12.3s.
func fmtDur(d time.Duration) string {
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%.1fd", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// JobsCSVHeader is the first row of WriteJobsCSV's file.
var JobsCSVHeader = []string{"policy", "id", "user", "gpus", "submit", "start", "end", "wait_s", "jct_s", "duration_s", "lost_s", "preemptions", "faults"}

// WriteJobsCSV writes every finished job's times under r's policy, one
// row each (JobsCSVHeader): policy, id, user, gpus, submit, start, end
// (RFC 3339), wait, jct, duration and lost (seconds), preemptions, faults.
func WriteJobsCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }
	for _, j := range r.Jobs {
		cw.Write([]string{r.Policy.Name, j.ID, j.User, strconv.FormatFloat(j.GPUs, 'f', -1, 64), j.Submit.Format(time.RFC3339), j.Start.Format(time.RFC3339),
			j.End.Format(time.RFC3339), sec(j.Wait()), sec(j.JCT()), sec(j.Duration), sec(j.Lost),
			strconv.Itoa(j.Preemptions), strconv.Itoa(j.Faults)})
	}
	cw.Flush()
	return cw.Error()
}
