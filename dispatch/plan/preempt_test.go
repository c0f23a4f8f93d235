package plan

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

// The victims: lowest priority first, then the most recently started; never
// a run that is not preemptible, of equal or higher priority, or cooling
// down; the worker needing the fewest.
func TestPreemptChoosesVictims(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	nodes := []Node{
		{ID: "a", FreeGPUs: 0, Runs: []Active{
			{ID: "a-old", Worker: "a", GPUs: 1, Priority: 0, Preemptible: true, StartedAt: at(1)},
			{ID: "a-new", Worker: "a", GPUs: 1, Priority: 0, Preemptible: true, StartedAt: at(5)},
			{ID: "a-low", Worker: "a", GPUs: 1, Priority: -1, Preemptible: true, StartedAt: at(2)},
			{ID: "a-fixed", Worker: "a", GPUs: 1, Priority: -5, StartedAt: at(0)},
		}},
		{ID: "b", FreeGPUs: 1, Runs: []Active{
			{ID: "b-cool", Worker: "b", GPUs: 1, Priority: 0, Preemptible: true, StartedAt: at(3), PreemptedAt: at(90)},
			{ID: "b-peer", Worker: "b", GPUs: 2, Priority: 10, Preemptible: true, StartedAt: at(3)},
		}},
	}
	urgent := queued("urgent", 2, 10)
	got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&urgent}, CooldownSince: at(60)})
	if len(got) != 1 || got[0].Worker != "a" || !slices.Equal(got[0].Victims, []string{"a-low", "a-new"}) {
		t.Fatalf("got %+v, want a-low then a-new on a", got)
	}
	// Once the cooldown has passed, b needs one victim only.
	got = Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&urgent}, CooldownSince: at(100)})
	if len(got) != 1 || got[0].Worker != "b" || !slices.Equal(got[0].Victims, []string{"b-cool"}) {
		t.Fatalf("after the cooldown got %+v, want b-cool on b", got)
	}
	// A run of priority 0 preempts nothing of priority 0.
	peer := queued("peer", 1, 0)
	if got := Preempt(PreemptInput{Nodes: nodes[:1], Waiting: []*core.Task{&peer}}); len(got) != 1 || !slices.Equal(got[0].Victims, []string{"a-low"}) {
		t.Fatalf("priority 0: %+v, want only a-low (priority -1)", got)
	}
}

func TestPreemptProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var nodes []Node
		byID := map[string]Active{}
		for i := range rapid.IntRange(0, 5).Draw(t, "nodes") {
			n := Node{ID: fmt.Sprint("w", i), FreeGPUs: rapid.IntRange(0, 3).Draw(t, "free"),
				FreeCPUMillis: 500 * rapid.Int64Range(0, 4).Draw(t, "freeCPU"), FreeMemoryMB: 1024 * rapid.Int64Range(0, 4).Draw(t, "freeMem")}
			for j := range rapid.IntRange(0, 5).Draw(t, "runs") {
				r := Active{ID: fmt.Sprintf("w%d-r%d", i, j), Worker: n.ID, GPUs: rapid.IntRange(0, 4).Draw(t, "gpus"),
					CPUMillis: 500 * rapid.Int64Range(0, 4).Draw(t, "cpu"), MemoryMB: 1024 * rapid.Int64Range(0, 4).Draw(t, "mem"),
					Priority: rapid.IntRange(-2, 3).Draw(t, "prio"), Preemptible: rapid.Bool().Draw(t, "preemptible"),
					StartedAt: t0.Add(time.Duration(rapid.IntRange(0, 100).Draw(t, "started")) * time.Second)}
				if rapid.IntRange(0, 3).Draw(t, "preempted") == 0 {
					r.PreemptedAt = t0.Add(time.Duration(rapid.IntRange(0, 100).Draw(t, "preemptedAt")) * time.Second)
				}
				n.Runs = append(n.Runs, r)
				byID[r.ID] = r
			}
			nodes = append(nodes, n)
		}
		var waiting []*core.Task
		for i := range rapid.IntRange(0, 6).Draw(t, "waiting") {
			q := queued(fmt.Sprint("q", i), rapid.IntRange(0, 6).Draw(t, "need"), rapid.IntRange(-1, 4).Draw(t, "qprio"))
			q.CPUs, q.MemoryMB = 0.5*float64(rapid.IntRange(0, 8).Draw(t, "needCPU")), 1024*rapid.Int64Range(0, 8).Draw(t, "needMem")
			waiting = append(waiting, &q)
		}
		in := PreemptInput{Nodes: nodes, Waiting: waiting, Max: rapid.IntRange(0, 4).Draw(t, "max"),
			CooldownSince: t0.Add(time.Duration(rapid.IntRange(0, 100).Draw(t, "cooldown")) * time.Second)}
		got := Preempt(in)
		if len(got) > max(in.Max, 1) {
			t.Fatalf("%d preemptions, at most %d", len(got), max(in.Max, 1))
		}
		victim := map[string]bool{}
		for _, p := range got {
			var node Node
			for _, n := range nodes {
				if n.ID == p.Worker {
					node = n
				}
			}
			freed, cpu, mem := node.FreeGPUs, node.FreeCPUMillis, node.FreeMemoryMB
			wantCPU, wantMem := need(p.For)
			for k, id := range p.Victims {
				r, ok := byID[id]
				switch {
				case !ok || r.Worker != p.Worker:
					t.Fatalf("victim %s of %s is not on %s", id, p.For.ID, p.Worker)
				case victim[id]:
					t.Fatalf("%s chosen twice", id)
				case !r.Preemptible:
					t.Fatalf("%s is not preemptible", id)
				case r.Priority >= p.For.Priority:
					t.Fatalf("%s (priority %d) preempted for %s (priority %d)", id, r.Priority, p.For.ID, p.For.Priority)
				case !r.PreemptedAt.IsZero() && !r.PreemptedAt.Before(in.CooldownSince):
					t.Fatalf("%s preempted again within its cooldown", id)
				case !(freed < p.For.GPUs && r.GPUs > 0 || cpu < wantCPU && r.CPUMillis > 0 || mem < wantMem && r.MemoryMB > 0):
					t.Fatalf("victim %d (%s) frees nothing %s lacks: %d GPUs, %d millicores, %d MiB free for %d, %d, %d",
						k, id, p.For.ID, freed, cpu, mem, p.For.GPUs, wantCPU, wantMem)
				}
				victim[id] = true
				freed, cpu, mem = freed+r.GPUs, cpu+r.CPUMillis, mem+r.MemoryMB
			}
			if freed < p.For.GPUs || cpu < wantCPU || mem < wantMem {
				t.Fatalf("%s needs %d GPUs, %d millicores, %d MiB; %s frees to %d, %d, %d", p.For.ID, p.For.GPUs, wantCPU, wantMem, p.Worker, freed, cpu, mem)
			}
		}
	})
}

// A run waiting for cores or memory (issue 26), with GPUs or without,
// preempts preemptible runs of lower priority that hold them; a run that
// frees nothing it lacks is spared, and a worker that does not report its
// cores and memory (Unlimited) never lacks them.
func TestPreemptCoresAndMemory(t *testing.T) {
	nodes := []Node{{ID: "a", FreeGPUs: 1, FreeCPUMillis: 500, FreeMemoryMB: 1024, Runs: []Active{
		{ID: "gpu-only", Worker: "a", GPUs: 1, Priority: -2, Preemptible: true, StartedAt: t0},
		{ID: "cpu-low", Worker: "a", CPUMillis: 1000, MemoryMB: 512, Priority: -1, Preemptible: true, StartedAt: t0},
		{ID: "cpu-mid", Worker: "a", CPUMillis: 1000, MemoryMB: 4096, Priority: 0, Preemptible: true, StartedAt: t0},
		{ID: "fixed", Worker: "a", CPUMillis: 4000, MemoryMB: 8192, Priority: -5, StartedAt: t0},
	}}}
	cpuRun := queued("cpu", 0, 5)
	cpuRun.CPUs, cpuRun.MemoryMB = 2, 2048
	got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&cpuRun}})
	if len(got) != 1 || !slices.Equal(got[0].Victims, []string{"cpu-low", "cpu-mid"}) {
		t.Fatalf("a CPU run waiting for 2 cores and 2 GiB: %+v, want cpu-low then cpu-mid (gpu-only frees none of them)", got)
	}
	gpuRun := queued("gpu", 1, 5)
	gpuRun.MemoryMB = 1500
	if got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&gpuRun}}); len(got) != 1 || !slices.Equal(got[0].Victims, []string{"cpu-low"}) {
		t.Fatalf("a GPU run with its GPU free, waiting for memory: %+v, want cpu-low", got)
	}
	peer := queued("peer", 0, -1)
	peer.CPUs = 2
	if got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&peer}}); len(got) != 0 {
		t.Fatalf("priority -1 preempts nothing that frees 2 cores: %+v", got)
	}
	nodes[0].FreeCPUMillis, nodes[0].FreeMemoryMB = Unlimited, Unlimited
	if got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&cpuRun}}); len(got) != 0 {
		t.Fatalf("a worker with unreported cores and memory: %+v, want no preemption", got)
	}
	// Waiting serves it: it asks for cores and memory only.
	s := Snapshot{Connected: 1, MaxSlots: 1}
	if w := Waiting(s, []core.Task{cpuRun}, nil); len(w) != 1 || w[0].ID != "cpu" {
		t.Fatalf("Waiting = %v, want the CPU run", w)
	}
}

// INTERACTIVE_PREEMPTS (issue 34): a session waiting for a GPU preempts a
// preemptible batch run of its own priority, never another session, a
// batch run that is not preemptible or one of higher priority; without the
// setting, or for a batch run waiting, equal priority stays untouched.
func TestPreemptInteractiveOverBatch(t *testing.T) {
	nodes := []Node{{ID: "a", Runs: []Active{
		{ID: "batch", Worker: "a", GPUs: 1, Priority: 0, Preemptible: true, StartedAt: t0},
		{ID: "session", Worker: "a", GPUs: 1, Priority: 0, Preemptible: true, Interactive: true, StartedAt: t0.Add(time.Second)},
		{ID: "fixed", Worker: "a", GPUs: 1, Priority: 0, StartedAt: t0},
		{ID: "higher", Worker: "a", GPUs: 1, Priority: 5, Preemptible: true, StartedAt: t0},
	}}}
	sess := queued("s", 1, 0)
	sess.Kind = core.KindInteractive
	got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&sess}, InteractiveOverBatch: true})
	if len(got) != 1 || !slices.Equal(got[0].Victims, []string{"batch"}) {
		t.Fatalf("a session with INTERACTIVE_PREEMPTS: %+v, want the batch run only", got)
	}
	if got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&sess}}); len(got) != 0 {
		t.Fatalf("a session without the setting: %+v, want none", got)
	}
	two := queued("s2", 2, 0)
	two.Kind = core.KindInteractive
	if got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&two}, InteractiveOverBatch: true}); len(got) != 0 {
		t.Fatalf("a 2-GPU session where only one batch run may go: %+v, want none", got)
	}
	batch := queued("b", 1, 0)
	if got := Preempt(PreemptInput{Nodes: nodes, Waiting: []*core.Task{&batch}, InteractiveOverBatch: true}); len(got) != 0 {
		t.Fatalf("a batch run with the setting: %+v, want none", got)
	}
}

// With SessionsFirst, the GPU a session preempted a batch run of its
// priority for goes to the session, not back to the older victim.
func TestSessionsFirstTakeTheFreedGPU(t *testing.T) {
	victim, sess := queued("victim", 1, 0), queued("session", 1, 0)
	sess.Kind = core.KindInteractive
	s := Snapshot{Connected: 1, MaxGPUs: 1, Free: []Worker{{ID: "a", FreeGPUs: []int{0}, GPUs: 1}}}
	if got := Place(s, []core.Task{victim, sess}); len(got) != 1 || got[0].Task.ID != "victim" {
		t.Fatalf("without SessionsFirst: %+v, want the older run", got)
	}
	s.SessionsFirst = true
	if got := Place(s, []core.Task{victim, sess}); len(got) != 1 || got[0].Task.ID != "session" {
		t.Fatalf("with SessionsFirst: %+v, want the session", got)
	}
}
