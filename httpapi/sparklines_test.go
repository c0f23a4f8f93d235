package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// TestSparklines: a run's series is thinned to its first, last and evenly
// spaced points; a run without the series, or unknown, is left out; bad
// ids and too many are 400s naming the field.
func TestSparklines(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	long, short, none := e.submit(tok, `{"command":["a"]}`), e.submit(tok, `{"command":["a"]}`), e.submit(tok, `{"command":["a"]}`)
	var pts []core.MetricPoint
	for i := range 1000 {
		pts = append(pts, core.MetricPoint{Step: int64(i), Name: "episode_reward", Value: float64(i * 2)})
	}
	ctx := context.Background()
	if err := e.st.AppendMetrics(ctx, long, pts); err != nil {
		t.Fatal(err)
	}
	if err := e.st.AppendMetrics(ctx, short, []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: 3}, {Step: 1, Name: "loss", Value: 9}}); err != nil {
		t.Fatal(err)
	}
	r := e.req("GET", "/api/sparklines?ids="+strings.Join([]string{long, short, none, "r-missing", long}, ","), tok, nil)
	if r.status != http.StatusOK {
		t.Fatalf("sparklines: %d %s", r.status, r.body)
	}
	var b struct {
		Name  string                  `json:"name"`
		Items map[string][][2]float64 `json:"items"`
	}
	mustJSON(t, r.body, &b)
	l := b.Items[long]
	if b.Name != "episode_reward" || len(b.Items) != 2 || len(l) != sparkPoints || l[0] != [2]float64{0, 0} || l[len(l)-1] != [2]float64{999, 1998} ||
		fmt.Sprint(b.Items[short]) != "[[1 3]]" {
		t.Fatalf("sparklines: %s", r.body)
	}
	for i := 1; i < len(l); i++ {
		if l[i][0] <= l[i-1][0] {
			t.Fatalf("points out of order at %d: %v", i, l)
		}
	}
	if r := e.req("GET", "/api/sparklines?name=loss&ids="+short, tok, nil); !strings.Contains(string(r.body), `"`+short+`":[[1,9]]`) {
		t.Fatalf("name=loss: %d %s", r.status, r.body)
	}
	bad := func(q, want string) {
		t.Helper()
		r := e.req("GET", "/api/sparklines?"+q, tok, nil)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), want) {
			t.Fatalf("%s: %d %s; want 400 with %q", q, r.status, r.body, want)
		}
		r.errCode(t)
	}
	bad("ids=../etc", "ids must be run ids")
	bad("ids="+strings.Repeat(long+",", maxSparkIDs+1), "at most 100 runs")
	bad("ids="+long+"&name="+strings.Repeat("x", 129), "name:")
}
