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

	if err := s.AppendMetrics(ctx, "r-missing", []core.MetricPoint{{Step: 1, Name: "x", Value: 1}}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("AppendMetrics(missing): got %v, want ErrNotFound", err)
	}
	if _, err := s.Metrics(ctx, "r-missing", nil); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Metrics(missing): got %v, want ErrNotFound", err)
	}
}
