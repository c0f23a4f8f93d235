package core

import (
	"strings"
	"testing"
	"time"
)

// A run's history has one entry per move: a lost attempt requeued, a
// preempted one naming who preempted it, each attempt's worker; View puts
// the submission first.
func TestHistory(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tk := Task{ID: "r1", Status: StatusQueued, Attempt: 1, MaxRetries: 1, CreatedAt: t0}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tk.Dispatch("w1", []int{0}, 1))
	must(tk.Start(at(1)))
	must(tk.Lose("lease of worker w1 expired"))
	if _, err := tk.Requeue("lease of worker w1 expired", at(130)); err != nil {
		t.Fatal(err)
	}
	copyBefore := tk // shares the list: an append must not write into it
	must(tk.Dispatch("w2", []int{1}, 2))
	must(tk.Start(at(140)))
	must(tk.Preempt("preempted by r9 (priority 10)", at(200)))
	must(tk.Dispatch("w2", []int{1}, 3))
	must(tk.Start(at(210)))
	must(tk.Finish(StatusFailed, nil, "exit code 1", at(300)))
	if len(copyBefore.History) != 4 {
		t.Fatalf("a copy's history changed: %+v", copyBefore.History)
	}

	var got []string
	for _, e := range tk.View().History {
		got = append(got, e.Status+"/"+string(rune('0'+e.Attempt))+"/"+e.Worker+"/"+e.Reason)
	}
	want := []string{"QUEUED/1//", "DISPATCHED/1/w1/", "RUNNING/1/w1/", "LOST/1//lease of worker w1 expired",
		"QUEUED/2//lease of worker w1 expired", "DISPATCHED/2/w2/", "RUNNING/2/w2/",
		"PREEMPTED/2//preempted by r9 (priority 10)", "DISPATCHED/3/w2/", "RUNNING/3/w2/", "FAILED/3//exit code 1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if v := tk.View().History; !v[0].At.Equal(t0) || !v[2].At.Equal(at(1)) || !v[7].At.Equal(at(200)) {
		t.Fatalf("times: %+v", v)
	}
}

// A run from before histories, and one ended by a write that records
// none (a queued run cancelled in the store), read as their fields say.
func TestHistoryViewFromFields(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st, fin := t0.Add(time.Second), t0.Add(time.Minute)
	old := Task{Status: StatusSucceeded, Attempt: 1, Worker: "w1", CreatedAt: t0, StartedAt: &st, FinishedAt: &fin}
	h := old.View().History
	if len(h) != 3 || h[0].Status != "QUEUED" || h[1].Status != "RUNNING" || h[1].Worker != "w1" || h[2].Status != "SUCCEEDED" || !h[2].At.Equal(fin) {
		t.Fatalf("an old run's history: %+v", h)
	}
	cancelled := Task{Status: StatusCancelled, Attempt: 1, CreatedAt: t0, FinishedAt: &fin, Error: "cancelled by alice"}
	if h := cancelled.View().History; len(h) != 2 || h[1].Status != "CANCELLED" || h[1].Reason != "cancelled by alice" {
		t.Fatalf("a run cancelled in the store: %+v", h)
	}
	queued := Task{Status: StatusQueued, Attempt: 1, CreatedAt: t0}
	if h := queued.View().History; len(h) != 1 || h[0].Status != "QUEUED" {
		t.Fatalf("a new run: %+v", h)
	}
}

// A history past MaxHistory keeps its first entry and its newest.
func TestHistoryBounded(t *testing.T) {
	tk := Task{Status: StatusQueued, Attempt: 1, MaxRetries: 1000, CreatedAt: time.Now()}
	for i := 0; i < 200; i++ {
		if err := tk.Dispatch("w", nil, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		if err := tk.Preempt("preempted by r9 (priority 10)", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if len(tk.History) != MaxHistory || tk.History[0].Attempt != 1 || tk.History[len(tk.History)-1].Attempt != 200 {
		t.Fatalf("%d entries, first of attempt %d, last of attempt %d", len(tk.History), tk.History[0].Attempt, tk.History[len(tk.History)-1].Attempt)
	}
}
