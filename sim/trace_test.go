package sim

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// wantTrace checks a trace's jobs (id → GPUs and duration, in submission
// order) and which ids it skipped, each reason containing a word.
func wantTrace(t *testing.T, tr *Trace, jobs []Job, skipped map[string]string) {
	t.Helper()
	var got []string
	for _, j := range tr.Jobs {
		got = append(got, j.ID)
	}
	var want []string
	for _, j := range jobs {
		want = append(want, j.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("jobs %v, want %v", got, want)
	}
	for i, j := range jobs {
		g := tr.Jobs[i]
		if g.GPUs != j.GPUs || g.Duration != j.Duration || g.User != j.User {
			t.Errorf("%s: %d GPUs for %v by %q, want %d for %v by %q", j.ID, g.GPUs, g.Duration, g.User, j.GPUs, j.Duration, j.User)
		}
	}
	why := map[string]string{}
	for _, s := range tr.Skipped {
		why[s.ID] = s.Reason
	}
	if len(why) != len(skipped) {
		t.Errorf("skipped %v, want %v", why, skipped)
	}
	for id, word := range skipped {
		if !strings.Contains(why[id], word) {
			t.Errorf("%s skipped for %q, want it to say %q", id, why[id], word)
		}
	}
}

func TestReadPhilly(t *testing.T) {
	tr, err := ReadPhilly(open(t, "philly_cluster_job_log.json"))
	if err != nil {
		t.Fatal(err)
	}
	wantTrace(t, tr, []Job{
		{ID: "application_1506638472019_10230", User: "0f2a11", GPUs: 8, Duration: 3 * time.Hour},
		{ID: "application_1506638472019_10238", User: "ca9ed7", GPUs: 1, Duration: 5*time.Minute + 16*time.Second},
		{ID: "application_1506638472019_10240", User: "ca9ed7", GPUs: 4, Duration: time.Hour},
		{ID: "application_1506638472019_10244", User: "d7b3e1", GPUs: 2, Duration: 30 * time.Minute}, // two attempts
		{ID: "application_1506638472019_10250", User: "d7b3e1", GPUs: 16, Duration: 2 * time.Hour},   // two machines
	}, map[string]string{
		"application_1506638472019_10251": "no attempts",
		"application_1506638472019_10252": "not a time",
	})
	if !slices.Equal(tr.Ignored, []string{"status", "vc"}) {
		t.Errorf("ignored %v", tr.Ignored)
	}
	if _, err := ReadPhilly(strings.NewReader(`{"jobid": 1}`)); err == nil {
		t.Error("an object, not an array: no error")
	}
}

func TestReadHelios(t *testing.T) {
	tr, err := ReadHelios(open(t, "helios_venus_cluster_log.csv"))
	if err != nil {
		t.Fatal(err)
	}
	wantTrace(t, tr, []Job{
		{ID: "5471", User: "u0301", GPUs: 8, Duration: 2 * time.Hour},
		{ID: "5478", User: "u0301", GPUs: 2, Duration: 20 * time.Minute},
		{ID: "5472", User: "u0301", GPUs: 1, Duration: 30 * time.Minute},
		{ID: "5473", User: "u0512", GPUs: 4, Duration: time.Hour},
		{ID: "5474", User: "u0512", GPUs: 0, Duration: 10 * time.Minute},
		{ID: "5475", User: "u0777", GPUs: 16, Duration: 4 * time.Hour},
	}, map[string]string{
		"5476":    "negative",
		"5477":    "not a number",
		"line 10": "fields",
	})
	if !slices.Contains(tr.Ignored, "extra_column") || slices.Contains(tr.Ignored, "gpu_num") {
		t.Errorf("ignored %v", tr.Ignored)
	}
	if _, err := ReadHelios(strings.NewReader("a,b\n1,2\n")); err == nil || !strings.Contains(err.Error(), "job_id") {
		t.Errorf("no job_id column: %v", err)
	}
}

func TestReadAlibaba(t *testing.T) {
	tr, err := ReadAlibaba(open(t, "pai_job_table.csv"), open(t, "pai_task_table.csv"))
	if err != nil {
		t.Fatal(err)
	}
	wantTrace(t, tr, []Job{
		{ID: "6a7d2bbc4c1b7e3e5d5b0f11", User: "58540f191766", GPUs: 1, Duration: 7190 * time.Second},
		{ID: "0b1f2a3c4d5e6f708192a3b4", User: "a2eb4cd6d9ac", GPUs: 2, Duration: 1780 * time.Second}, // 2 × 50 %, rounded up
		{ID: "1c2d3e4f5a6b7c8d9e0f1a2b", User: "58540f191766", GPUs: 8, Duration: 3590 * time.Second}, // ps without GPU + 4 × 2
		{ID: "2d3e4f5a6b7c8d9e0f1a2b3c", User: "a2eb4cd6d9ac", GPUs: 0, Duration: 1800 * time.Second},
	}, map[string]string{"3e4f5a6b7c8d9e0f1a2b3c4d": "no task"})
	// With header rows, the same.
	jobs := strings.Join(alibabaJobColumns, ",") + "\nj,1,u,Terminated,100,200\n"
	tasks := strings.Join(alibabaTaskColumns, ",") + "\nj,w,1,Terminated,100,160,100,1,100,V100\n"
	tr, err = ReadAlibaba(strings.NewReader(jobs), strings.NewReader(tasks))
	if err != nil || len(tr.Jobs) != 1 || tr.Jobs[0].Duration != time.Minute {
		t.Fatalf("with headers: %v %+v", err, tr)
	}
}

func TestSyntheticIsReproducible(t *testing.T) {
	s, err := ParseSynthetic("jobs=500,users=7,span=24h,high=0.1,preemptible=0.5,seed=3")
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.Trace(), s.Trace()
	if !reflect.DeepEqual(a.Jobs, b.Jobs) || len(a.Jobs) != 500 {
		t.Fatal("two generations of one spec differ")
	}
	users, high := map[string]bool{}, 0
	for i, j := range a.Jobs {
		users[j.User] = true
		if j.Priority > 0 {
			high++
		}
		if i > 0 && j.Submit.Before(a.Jobs[i-1].Submit) || j.Duration <= 0 || !slices.Contains([]int{1, 2, 4, 8}, j.GPUs) {
			t.Fatalf("job %d: %+v", i, j)
		}
	}
	if len(users) != 7 || high < 20 || high > 90 {
		t.Errorf("%d users, %d high", len(users), high)
	}
	for _, bad := range []string{"jobs=-1", "users=0", "span=0s", "nope=1", "high=2", "jobs"} {
		if _, err := ParseSynthetic(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestReadOpenB(t *testing.T) {
	tr, err := ReadOpenB(open(t, "openb_pod_list.csv"))
	if err != nil {
		t.Fatal(err)
	}
	wantTrace(t, tr, []Job{
		{ID: "openb-pod-0017", User: "qos-LS", GPUs: 1, Duration: 1332103 * time.Second},
		{ID: "openb-pod-0022", User: "qos-BE", GPUs: 0, Duration: 3590 * time.Second}, // 460 milli-GPUs: a share
		{ID: "openb-pod-0035", User: "qos-LS", GPUs: 8, Duration: 7100 * time.Second},
		{ID: "openb-pod-0041", User: "qos-BE", GPUs: 0, Duration: 600 * time.Second},
	}, map[string]string{"openb-pod-0050": "never scheduled", "openb-pod-0061": "not a number"})
	// The requests besides GPUs are kept (issue 31: fractions, cores,
	// memory and types simulated); WholeGPUs rounds the share up.
	share, big := tr.Jobs[1], tr.Jobs[2]
	if share.GPUFraction != 0.46 || share.CPUMillis != 6000 || share.MemoryMB != 12288 || !slices.Equal(share.GPUType, []string{"G2"}) ||
		big.GPUFraction != 0 || big.CPUMillis != 88000 || !slices.Equal(big.GPUType, []string{"V100M32"}) || tr.Jobs[3].GPUType != nil {
		t.Fatalf("requests: %+v %+v %+v", share, big, tr.Jobs[3])
	}
	tr.WholeGPUs()
	if j := tr.Jobs[1]; j.GPUs != 1 || j.GPUFraction != 0 {
		t.Fatalf("rounded up: %+v", j)
	}
}

func TestFromTasks(t *testing.T) {
	at := func(m int) *time.Time { x := t0.Add(time.Duration(m) * time.Minute); return &x }
	tr := FromTasks([]core.Task{
		{ID: "late", User: "bob", GPUs: 2, Priority: 3, Preemptible: true, CreatedAt: *at(5), StartedAt: at(6), FinishedAt: at(66), Status: core.StatusSucceeded},
		{ID: "early", User: "alice", GPUs: 1, CreatedAt: *at(0), StartedAt: at(1), FinishedAt: at(11), Status: core.StatusFailed},
		{ID: "queued", User: "alice", CreatedAt: *at(2), Status: core.StatusQueued},
		{ID: "running", User: "alice", CreatedAt: *at(3), StartedAt: at(4), Status: core.StatusRunning},
	})
	wantTrace(t, tr, []Job{
		{ID: "early", User: "alice", GPUs: 1, Duration: 10 * time.Minute},
		{ID: "late", User: "bob", GPUs: 2, Duration: time.Hour},
	}, map[string]string{"queued": "QUEUED", "running": "RUNNING"})
	if j := tr.Jobs[1]; j.Priority != 3 || !j.Preemptible || !j.Submit.Equal(*at(5)) {
		t.Errorf("late: %+v", j)
	}
}

func TestReadOpenBPods(t *testing.T) {
	ps, err := ReadOpenBPods(open(t, "openb_pod_list.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Pods) != 4 || len(ps.Skipped) != 2 {
		t.Fatalf("pods %+v skipped %+v", ps.Pods, ps.Skipped)
	}
	share := ps.Pods[1]
	if share.Name != "openb-pod-0022" || !share.Shares() || share.GPUs() != 0.46 || share.CPUMilli != 6000 ||
		share.MemoryMiB != 12288 || !slices.Equal(share.GPUSpec, []string{"G2"}) || share.Duration() != 3590*time.Second {
		t.Errorf("the shared pod: %+v", share)
	}
	if whole := ps.Pods[2]; whole.Shares() || whole.GPUs() != 8 || !slices.Equal(whole.GPUSpec, []string{"V100M32"}) {
		t.Errorf("the 8-GPU pod: %+v", whole)
	}
	if cpu := ps.Pods[3]; cpu.Shares() || cpu.GPUs() != 0 || cpu.GPUSpec != nil {
		t.Errorf("the CPU pod: %+v", cpu)
	}
	if _, err := ReadOpenBPods(strings.NewReader("name,num_gpu,qos,creation_time,scheduled_time,deletion_time\n")); err == nil ||
		!strings.Contains(err.Error(), "cpu_milli") {
		t.Errorf("a list without the resource columns: %v", err)
	}
}
