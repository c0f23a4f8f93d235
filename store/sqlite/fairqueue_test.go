package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

// TestFairQueueProperties (issue 25): for any queue of runs in groups of
// one owner and one sweep, the window has min(limit, queued) runs, in queue
// order; each group's runs in it are the head of that group's own order;
// and a group holds fewer runs than another only when it has no more.
func TestFairQueueProperties(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "rlsched.db"))
	ctx := context.Background()
	var users []core.User
	for i := range 4 {
		u := core.User{Username: fmt.Sprintf("user%d", i), PasswordHash: "h"}
		if err := s.CreateUser(ctx, &u); err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
	}
	base := time.Unix(1_700_000_000, 0)
	rapid.Check(t, func(rt *rapid.T) {
		if _, err := s.w.ExecContext(ctx, `DELETE FROM tasks`); err != nil {
			rt.Fatal(err)
		}
		n := rapid.IntRange(0, 60).Draw(rt, "runs")
		type key struct {
			user  int64
			sweep string
		}
		var runs []*core.Task
		for i := range n {
			u := users[rapid.IntRange(0, len(users)-1).Draw(rt, "user")]
			sweep := []string{"", "s1", "s2"}[rapid.IntRange(0, 2).Draw(rt, "sweep")]
			runs = append(runs, &core.Task{ID: fmt.Sprintf("r%03d", i), UserID: u.ID, SweepID: sweep, Command: []string{"x"},
				Priority:  rapid.IntRange(0, 1).Draw(rt, "priority"),
				CreatedAt: base.Add(time.Duration(rapid.IntRange(0, 1000).Draw(rt, "age")) * time.Millisecond)})
		}
		for _, err := range s.CreateTasks(ctx, runs) {
			if err != nil {
				rt.Fatal(err)
			}
		}
		all, err := s.QueuedTasks(ctx, 1000)
		if err != nil || len(all) != n {
			rt.Fatalf("whole queue: %d runs, %v; want %d", len(all), err, n)
		}
		limit := rapid.IntRange(1, 40).Draw(rt, "limit")
		win, err := s.QueuedTasks(ctx, limit)
		if err != nil {
			rt.Fatal(err)
		}
		if len(win) != min(limit, n) {
			rt.Fatalf("window of %d holds %d of %d queued runs", limit, len(win), n)
		}
		pos := map[string]int{}
		for i, t := range all {
			pos[t.ID] = i
		}
		if !slices.IsSortedFunc(win, func(a, b core.Task) int { return pos[a.ID] - pos[b.ID] }) {
			rt.Fatalf("window not in queue order: %v", ids(win))
		}
		inWin := map[key]int{}
		for _, t := range win {
			inWin[key{t.UserID, t.SweepID}]++
		}
		total, seen := map[key]int{}, map[key]int{}
		chosen := map[string]bool{}
		for _, w := range win {
			chosen[w.ID] = true
		}
		for _, t := range all { // a group's runs in the window are its head
			k := key{t.UserID, t.SweepID}
			total[k]++
			if chosen[t.ID] != (seen[k] < inWin[k]) {
				rt.Fatalf("group %v's runs in the window are not the head of its queue (at %s)", k, t.ID)
			}
			seen[k]++
		}
		for k, got := range inWin {
			for k2, got2 := range inWin {
				if got+1 < got2 && total[k] > got {
					rt.Fatalf("group %v holds %d runs of its %d, group %v %d", k, got, total[k], k2, got2)
				}
			}
		}
		if len(win) < n && len(total) <= limit {
			for k := range total {
				if inWin[k] == 0 {
					rt.Fatalf("group %v has no run in a window of %d over %d groups", k, limit, len(total))
				}
			}
		}
	})
}

func ids(ts []core.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}
