package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// report is the soak's summary, written as chaos-report.json and
// chaos-report.md.
type report struct {
	Seed        int64          `json:"seed"`
	Duration    string         `json:"duration"`
	Wall        string         `json:"wall"`
	Started     time.Time      `json:"started"`
	Deployment  string         `json:"deployment"`
	Submissions map[string]int `json:"submissions"` // by outcome
	Faults      map[string]int `json:"faults"`      // by kind
	SkippedKind []string       `json:"skippedFaultKinds,omitempty"`
	NemesisErrs []string       `json:"nemesisErrors,omitempty"`
	Result      *checkResult   `json:"result"`
	FailedStart int            `json:"failedStarts"` // exits before a process was up (a master while MariaDB is down)
	FaultLog    []fault        `json:"faultLog"`
	Diagnosis   string         `json:"diagnosis,omitempty"` // the masters' raw answers about runs that did not end
	Acked       []submission   `json:"acked"`               // every acknowledged submission, for the post-mortem

	dir string // where write put it
}

func newReport(seed int64, dur time.Duration, began time.Time, cfg worldConfig, subs []submission, nem *nemesis,
	res *checkResult, skip map[string]bool) *report {
	r := &report{Seed: seed, Duration: dur.String(), Wall: time.Since(began).Round(time.Second).String(), Started: began.UTC(),
		Deployment: fmt.Sprintf("%d masters (MariaDB, Redis), %d workers × %d GPUs + %d CPU slots, lease TTL %d s, heartbeat TTL %d s",
			cfg.masters, cfg.workers, cfg.gpus, cfg.slots, cfg.taskTTL, cfg.hbTTL),
		Submissions: map[string]int{}, Faults: nem.counts(), Result: res}
	for _, s := range subs {
		r.Submissions[s.Outcome]++
		if s.Outcome == "acked" {
			r.Acked = append(r.Acked, s)
		}
	}
	for k := range skip {
		r.SkippedKind = append(r.SkippedKind, k)
	}
	sort.Strings(r.SkippedKind)
	nem.mu.Lock()
	r.FaultLog = append([]fault(nil), nem.faults...)
	r.NemesisErrs = append([]string(nil), nem.errs...)
	nem.mu.Unlock()
	return r
}

// write saves the report under RLSCHED_CHAOS_REPORT (or a new temp dir)
// and logs its summary.
func (r *report) write(t *testing.T) {
	t.Helper()
	dir := os.Getenv(reportEnv)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "rlsched-chaos-report-"); err != nil {
			t.Errorf("cannot create a report dir: %v", err)
			return
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("cannot create %s=%s: %v", reportEnv, dir, err)
		return
	}
	js, _ := json.MarshalIndent(r, "", "  ")
	md := r.markdown()
	for name, b := range map[string][]byte{"chaos-report.json": js, "chaos-report.md": []byte(md)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Errorf("cannot write the report: %v", err)
		}
	}
	r.dir = dir
	t.Logf("report in %s:\n%s", dir, md)
}

func (r *report) markdown() string {
	var b strings.Builder
	res := r.Result
	fmt.Fprintf(&b, "## Chaos soak, seed %d\n\n", r.Seed)
	fmt.Fprintf(&b, "%s of faults (%s wall) on %s.\n\n", r.Duration, r.Wall, r.Deployment)
	fmt.Fprintf(&b, "| submissions | acked | refused | indeterminate | succeeded | retries exhausted | executions | killed mid-run | logs checked | status reads |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	total := 0
	for _, n := range r.Submissions {
		total += n
	}
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n\n", total, r.Submissions["acked"], r.Submissions["refused"],
		r.Submissions["indeterminate"], res.Succeeded, len(res.Exhausted), res.Executions, res.Killed, res.LogsChecked, res.Reads)
	fmt.Fprintf(&b, "Attempts of the ended runs: %s. Closest two executions of one run that did not overlap: %.0f ms apart.\n\n",
		histogram(res.Attempts), res.MinGapMs)
	fmt.Fprintf(&b, "Faults: %s.", counts(r.Faults))
	if len(r.SkippedKind) > 0 {
		fmt.Fprintf(&b, " Left out (%s=skip): %s.", knownEnv, strings.Join(r.SkippedKind, ", "))
	}
	fmt.Fprintf(&b, " Starts that failed and were retried (a master while MariaDB is down): %d.\n\n", r.FailedStart)
	if len(res.Violations) == 0 {
		b.WriteString("Violations: none.\n")
	} else {
		fmt.Fprintf(&b, "Violations: %s.\n\n", counts(res.ByKind))
		for i, v := range res.Violations {
			if i == 30 {
				fmt.Fprintf(&b, "- … %d more in chaos-report.json\n", len(res.Violations)-30)
				break
			}
			fmt.Fprintf(&b, "- %s: %s\n", v.Kind, v.Detail)
		}
	}
	if len(res.Exhausted) > 0 {
		fmt.Fprintf(&b, "\nRuns whose retries the nemesis exhausted (allowed): %s\n", strings.Join(res.Exhausted, "; "))
	}
	return b.String()
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func histogram(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
