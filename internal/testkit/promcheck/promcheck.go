// Package promcheck lets tests hold a /metrics scrape to what Prometheus
// accepts: `promtool check metrics` must find nothing to complain about,
// and the samples are there to assert on. It also has promtool parse
// PromQL (a dashboard's queries).
//
// promtool is $PROMTOOL, else the one on PATH (Debian's prometheus package
// ships /usr/bin/promtool; .ci/run installs it). Without it a test is
// skipped, or fails under CI=true, as internal/testkit/testsvc does for Redis. This
// package is for tests only and never installs anything.
package promcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Promtool returns the path of promtool, or skips t (fails it under CI=true).
func Promtool(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promcheck: promtool not found (apt-get install prometheus, or set PROMTOOL)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// Check fails t when `promtool check metrics` complains about exposition
// (a scrape in the text format), quoting every complaint.
func Check(t testing.TB, exposition []byte) {
	t.Helper()
	tool := Promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// CheckPromQL fails t unless promtool parses every expression of exprs
// (PromQL, with any Grafana variables already replaced): they go into a
// rules file of recording rules, which `promtool check rules` parses with
// Prometheus' own PromQL parser. names[i] says where exprs[i] came from in
// the failure message.
func CheckPromQL(t testing.TB, names, exprs []string) {
	t.Helper()
	tool := Promtool(t)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	rules := make([]rule, len(exprs))
	var legend strings.Builder
	for i, e := range exprs {
		rules[i] = rule{Record: fmt.Sprintf("check:expr_%d", i), Expr: e}
		fmt.Fprintf(&legend, "check:expr_%d: %s\n", i, names[i])
	}
	// JSON is YAML, which promtool reads.
	b, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "check", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, legend.String())
	}
}

// Scrape GETs url and returns the body, failing t unless the answer is 200
// in the text format.
func Scrape(t testing.TB, url string) []byte {
	t.Helper()
	c := http.Client{Timeout: time.Minute}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("cannot scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("cannot read the scrape of %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape of %s: status %d: %s", url, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("scrape of %s: Content-Type %q, want Prometheus' text format", url, ct)
	}
	return body
}

// Parse decodes a scrape in the text format, failing t on a syntax error.
func Parse(t testing.TB, exposition []byte) Families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		t.Fatalf("cannot parse the scrape: %v", err)
	}
	return fams
}

// Families are a parsed scrape, by metric family name.
type Families map[string]*dto.MetricFamily

// Value returns the value of the sample of family name whose labels
// include labels (name=value pairs): a counter's, gauge's or untyped
// value, a histogram's or summary's count. ok is false when no sample
// matches.
func (f Families) Value(name string, labels ...string) (v float64, ok bool) {
	if len(labels)%2 != 0 {
		panic("BUG: promcheck.Value wants name=value pairs, got an odd count of labels")
	}
	mf := f[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Summary != nil:
			return float64(m.Summary.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// Series is the number of samples (label sets) of family name.
func (f Families) Series(name string) int {
	if mf := f[name]; mf != nil {
		return len(mf.GetMetric())
	}
	return 0
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i < len(pairs); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == pairs[i] && lp.GetValue() == pairs[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
