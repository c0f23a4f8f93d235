package obs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	dto "github.com/prometheus/client_model/go"
	"github.com/rlsched/rlsched/internal/testkit/promcheck"
)

const dashboardFile = "../../docs/grafana/rlsched.json"

// grafanaDashboard is the part of the dashboard JSON the checks read.
type grafanaDashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Panels        []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			Type, UID string
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			Expr       string `json:"expr"`
			Datasource struct{ Type, UID string }
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name, Type string
			Query      json.RawMessage
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) ([]byte, grafanaDashboard) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return b, d
}

// TestDashboardSchema holds the dashboard to Grafana's own schema for
// dashboards and for each panel type (grafana-foundation-sdk's strict
// decoding: unknown fields, missing required fields, wrong types), and to
// what an import needs: a recent schemaVersion, every query on the
// ${DS_PROMETHEUS} datasource variable, panels that do not overlap.
func TestDashboardSchema(t *testing.T) {
	b, d := readDashboard(t)
	plugins.RegisterDefaultPlugins()
	var sd dashboard.Dashboard
	err := sd.UnmarshalJSONStrict(b)
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		err = nil // the SDK returns an empty error list as a non-nil error
	}
	if err == nil {
		if err = sd.Validate(); errors.As(err, &be) && len(be) == 0 {
			err = nil
		}
	}
	if err != nil {
		t.Errorf("Grafana's dashboard schema refuses %s:\n%v", dashboardFile, err)
	}

	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want at least 36", d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error("no Prometheus datasource variable DS_PROMETHEUS")
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: want queries on ${DS_PROMETHEUS}", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${DS_PROMETHEUS}" || strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: a target without an expression on ${DS_PROMETHEUS}", p.Title)
			}
		}
	}
}

// family is a metric family of the registries: its type and label names.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
}

// exposedFamilies gathers the master's and the gateway's registries with
// every metric exercised.
func exposedFamilies(t *testing.T) map[string]family {
	t.Helper()
	fams := map[string]family{}
	for _, g := range []interface {
		Gather() ([]*dto.MetricFamily, error)
	}{exercisedMaster(t).Registry(), exercisedGateway(t).Registry()} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			f := family{typ: mf.GetType(), labels: map[string]bool{}}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					f.labels[lp.GetName()] = true
				}
			}
			fams[mf.GetName()] = f
		}
	}
	return fams
}

var (
	metricNameRe = regexp.MustCompile(`\b(?:rlsched|go|process)_[a-z0-9_]*[a-z0-9]`)
	// A selector's matchers: name{label op "value", ...}.
	selectorRe = regexp.MustCompile(`\b((?:rlsched|go|process)_[a-z0-9_]*[a-z0-9])\s*\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	groupingRe = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	// label_values(metric, label) of a query variable.
	labelValuesRe = regexp.MustCompile(`^label_values\(\s*([a-z_:][a-z0-9_:]*)\s*,\s*([a-z_][a-z0-9_]*)\s*\)$`)
)

// Labels Prometheus adds at scrape time, and a histogram's bucket label.
var scrapeLabels = map[string]bool{"instance": true, "job": true}

// resolve maps a series name of an expression to the family that exposes
// it (a histogram's _bucket, _sum and _count are its own).
func resolve(fams map[string]family, name string) (string, family, bool) {
	if f, ok := fams[name]; ok {
		return name, f, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suf)
		if !found {
			continue
		}
		if f, ok := fams[base]; ok && (f.typ == dto.MetricType_HISTOGRAM || (f.typ == dto.MetricType_SUMMARY && suf != "_bucket")) {
			return base, f, true
		}
	}
	return "", family{}, false
}

// TestDashboardMatchesRegistry keeps the dashboard from drifting from the
// code: every metric it queries is exposed by the master's or the
// gateway's registry, every label it matches or groups by is one those
// metrics carry, every query parses as PromQL, and every rlsched metric of
// the registries is on some panel.
func TestDashboardMatchesRegistry(t *testing.T) {
	_, d := readDashboard(t)
	fams := exposedFamilies(t)
	used := map[string]bool{}
	var names, exprs []string

	check := func(where, expr string) {
		t.Helper()
		exprLabels := map[string]bool{"le": true}
		for _, name := range metricNameRe.FindAllString(expr, -1) {
			base, f, ok := resolve(fams, name)
			if !ok {
				t.Errorf("%s: %s is not exposed by the master or the gateway", where, name)
				continue
			}
			used[base] = true
			for l := range f.labels {
				exprLabels[l] = true
			}
		}
		for _, m := range selectorRe.FindAllStringSubmatch(expr, -1) {
			_, f, ok := resolve(fams, m[1])
			if !ok {
				continue
			}
			for _, lm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
				if !f.labels[lm[1]] && !scrapeLabels[lm[1]] {
					t.Errorf("%s: %s has no label %q", where, m[1], lm[1])
				}
			}
		}
		for _, g := range groupingRe.FindAllStringSubmatch(expr, -1) {
			for l := range strings.SplitSeq(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !exprLabels[l] && !scrapeLabels[l] {
					t.Errorf("%s: groups by %q, which none of its metrics carries", where, l)
				}
			}
		}
	}

	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
		"$master", ".*", "$gateway", ".*")
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			where := fmt.Sprintf("panel %q query %d", p.Title, i)
			check(where, tg.Expr)
			names = append(names, where)
			exprs = append(exprs, grafanaVars.Replace(tg.Expr))
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			continue
		}
		m := labelValuesRe.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: want label_values(metric, label), got %q", v.Name, q.Query)
			continue
		}
		check("variable "+v.Name, m[1]+`{`+m[2]+`=~".+"}`)
	}
	promcheck.CheckPromQL(t, names, exprs)

	var unused []string
	for name := range fams {
		if strings.HasPrefix(name, "rlsched_") && !used[name] {
			unused = append(unused, name)
		}
	}
	slices.Sort(unused)
	if len(unused) > 0 {
		t.Errorf("exposed but on no panel of the dashboard: %v", unused)
	}
}
