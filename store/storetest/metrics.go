package storetest

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

func testMetrics(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	mustTask(t, s, u, "r1", 0, at(0))
	mustTask(t, s, u, "r2", 0, at(1))
	mustTask(t, s, u, "r-empty", 0, at(2))

	add := func(id string, pts ...core.MetricPoint) {
		t.Helper()
		if err := s.AppendMetrics(ctx, id, pts); err != nil {
			t.Fatalf("AppendMetrics(%s): %v", id, err)
		}
	}
	// Out of step order, across batches, with a resent step and bad values.
	add("r1",
		core.MetricPoint{Step: 3, Name: "episode_reward", Value: 30.5},
		core.MetricPoint{Step: 1, Name: "episode_reward", Value: 10},
		core.MetricPoint{Step: 2, Name: "loss", Value: 0.25},
		core.MetricPoint{Step: 2, Name: "loss", Value: math.NaN()},
	)
	add("r1",
		core.MetricPoint{Step: 2, Name: "episode_reward", Value: 20},
		core.MetricPoint{Step: 1, Name: "loss", Value: 0.5},
		core.MetricPoint{Step: 3, Name: "episode_reward", Value: 31}, // resent: last wins
		core.MetricPoint{Step: 4, Name: "loss", Value: math.Inf(1)},
		core.MetricPoint{Step: 0, Name: "entropy", Value: -1e-9},
	)
	add("r2", core.MetricPoint{Step: 1, Name: "loss", Value: 9})
	add("r2") // nothing to add is fine

	f := func(id string, names []string, want map[string][][2]float64) {
		t.Helper()
		got, err := s.Metrics(ctx, id, names)
		if err != nil {
			t.Fatalf("Metrics(%s, %v): %v", id, names, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
			t.Fatalf("Metrics(%s, %v):\ngot  %v\nwant %v", id, names, got, want)
		}
	}
	reward := [][2]float64{{1, 10}, {2, 20}, {3, 31}}
	loss := [][2]float64{{1, 0.5}, {2, 0.25}}
	entropy := [][2]float64{{0, -1e-9}}
	f("r1", nil, map[string][][2]float64{"episode_reward": reward, "loss": loss, "entropy": entropy})
	f("r1", []string{}, map[string][][2]float64{"episode_reward": reward, "loss": loss, "entropy": entropy})
	f("r1", []string{"loss"}, map[string][][2]float64{"loss": loss})
	f("r1", []string{"loss", "episode_reward", "nope"}, map[string][][2]float64{"episode_reward": reward, "loss": loss})
	f("r1", []string{"nope"}, map[string][][2]float64{})
	f("r2", nil, map[string][][2]float64{"loss": {{1, 9}}})
	f("r-empty", nil, map[string][][2]float64{})

	// Times: stored with a point, kept when the point is stored again
	// without one (a rescan), replaced by a new one; NaN where none.
	add("r2", core.MetricPoint{Step: 2, Name: "loss", Value: 8, Time: 1_700_000_000_123},
		core.MetricPoint{Step: 3, Name: "loss", Value: 7, Time: 1_700_000_001_000})
	add("r2", core.MetricPoint{Step: 2, Name: "loss", Value: 8.5},
		core.MetricPoint{Step: 3, Name: "loss", Value: 7, Time: 1_700_000_002_000})
	timed, err := s.MetricsTimed(ctx, "r2", []string{"loss"})
	if err != nil {
		t.Fatalf("MetricsTimed(r2): %v", err)
	}
	if got, want := fmt.Sprint(timed), fmt.Sprint(map[string][][3]float64{"loss": {{1, 9, math.NaN()}, {2, 8.5, 1_700_000_000_123}, {3, 7, 1_700_000_002_000}}}); got != want {
		t.Fatalf("MetricsTimed(r2):\ngot  %v\nwant %v", got, want)
	}
	f("r2", nil, map[string][][2]float64{"loss": {{1, 9}, {2, 8.5}, {3, 7}}})
	if timed, err := s.MetricsTimed(ctx, "r-empty", nil); err != nil || len(timed) != 0 {
		t.Fatalf("MetricsTimed(r-empty) = %v, %v; want none", timed, err)
	}
	if _, err := s.MetricsTimed(ctx, "r-missing", nil); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("MetricsTimed(missing): got %v, want ErrNotFound", err)
	}

	if err := s.AppendMetrics(ctx, "r-missing", []core.MetricPoint{{Step: 1, Name: "x", Value: 1}}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("AppendMetrics(missing): got %v, want ErrNotFound", err)
	}
	if _, err := s.Metrics(ctx, "r-missing", nil); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Metrics(missing): got %v, want ErrNotFound", err)
	}
}

// BenchAppendMetrics stores batches of 64 new points (4 series × 16 steps,
// each with a time), as the master's log reader hands them over; ns/op is
// one point.
func BenchAppendMetrics(b *testing.B, s store.Store) {
	u := mustUserB(b, s)
	if err := s.CreateTask(b.Context(), &core.Task{ID: "bm", UserID: u.ID, Command: []string{"true"}}); err != nil {
		b.Fatal(err)
	}
	pts := make([]core.MetricPoint, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(pts) {
		for i := range pts {
			step := int64(n + i/4)
			pts[i] = core.MetricPoint{Step: step, Name: [4]string{"episode_reward", "loss", "entropy", "fps"}[i%4], Value: float64(i), Time: 1_700_000_000_000 + step}
		}
		if err := s.AppendMetrics(b.Context(), "bm", pts); err != nil {
			b.Fatal(err)
		}
	}
}
