package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testimage"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestImageCodeSnapshot (issue 27): a run submitted with --code and --image
// waits no_worker, saying why, while no worker has a container runtime;
// on one with podman it runs in the image (its marker file), in its code
// snapshot (RLSCHED_CODE_DIR, its cwd), the file as submitted, not as edited
// after.
func TestImageCodeSnapshot(t *testing.T) {
	flags, image := testimage.Need(t)
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	cfg := filepath.Join(b.Dir, "cli-alice")
	cli := func(args ...string) string {
		t.Helper()
		out, code := b.cli(cfg, append(args, "--server", m.URL)...)
		if code != 0 {
			t.Fatalf("rlsched %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	cli("login", "-u", "alice", "-p", rig.Password)
	proj := filepath.Join(b.Dir, "home", "alice", "proj")
	if err := os.MkdirAll(filepath.Join(proj, "exp"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(proj, "exp", "data.txt")
	if err := os.WriteFile(data, []byte("submitted bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(b.Dir, "home", "alice"), 0o700); err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(cli("submit", "--code", filepath.Join(proj, "exp"), "--image", image, "--",
		"bash", "-c", `cat `+testimage.Marker+`; cat data.txt; echo "cwd ${PWD#$RLSCHED_CODE_DIR}"`))
	if err := os.WriteFile(data, []byte("edited after submit\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// A worker without a runtime never gets it.
	b.StartWorker("worker-plain", m.RPC, rig.WorkerOpts{ID: "plain", GPUs: 0, Env: []string{"CONTAINER_RUNTIME=off"}})
	m.WaitJoined(t, "plain")
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		tk := alice.gpuTask(id)
		return tk.Status == "QUEUED" && tk.PendingCode == "no_worker", fmt.Sprintf("the run %+v", tk)
	})
	var tk struct {
		PendingReason string `json:"pendingReason"`
	}
	alice.Must("GET", "/api/tasks/"+id, nil, 200, &tk)
	if !strings.Contains(tk.PendingReason, "no connected worker has a container runtime") {
		t.Fatalf("pendingReason %q", tk.PendingReason)
	}

	b.StartWorker("worker-podman", m.RPC, rig.WorkerOpts{ID: "podman", GPUs: 0,
		Env: []string{"CONTAINER_FLAGS=" + strings.Join(flags, " ")}})
	m.WaitJoined(t, "podman")
	alice.waitStatus(id, "SUCCEEDED", 120*time.Second)
	text, _ := alice.logText(id)
	for _, want := range []string{testimage.MarkerContents + "\n", "submitted bytes\n", "cwd \n", "[rlsched] image " + image} {
		if !strings.Contains(text, want) {
			t.Fatalf("log lacks %q:\n%s", want, text)
		}
	}
}
