package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// envScript prints the run's environment, one NAME=VALUE per line.
const envScript = `import os
for k in sorted(os.environ):
    print("%s=%s" % (k, os.environ[k]))
print("RLSCHED_E2E_END")
`

// TestRunEnvHidesSecrets: a run is user code; it must not find the worker's
// join token (with it a user could join as any worker id, replace that
// worker's session and forge its reports) nor the master's JWT secret (with
// it a user could mint an ADMIN token) in its environment.
func TestRunEnvHidesSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	t.Parallel()
	check := func(t *testing.T, c *client, b *bed, secrets map[string]string) {
		id, _ := b.submit(c, map[string]any{"command": []string{"python3", "-c", envScript}})
		c.waitStatus(id, "SUCCEEDED", 30*time.Second)
		c.waitLogContains(id, "RLSCHED_E2E_END", 10*time.Second)
		log, err := c.logText(id)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log, "RLSCHED_TASK_ID="+id) {
			t.Fatalf("the env dump lacks RLSCHED_TASK_ID:\n%s", log)
		}
		for name, value := range secrets {
			if strings.Contains(log, value) {
				t.Errorf("the run can read %s (its value is in the run's environment)", name)
			}
		}
	}

	t.Run("worker", func(t *testing.T) {
		b := newBed(t)
		m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
		b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1"})
		m.WaitJoined(t, "w1")
		c, _ := signup(t, m.URL, "alice", "ADMIN")
		check(t, c, b, map[string]string{"WORKER_JOIN_TOKEN": b.JoinToken})
	})
	t.Run("up", func(t *testing.T) {
		b := newBed(t)
		up := b.startUp("up", filepath.Join(b.Dir, "data"),
			"JWT_SECRET="+b.JWTSecret, "WORKER_JOIN_TOKEN="+b.JoinToken)
		c, _ := signup(t, up.URL, "alice", "ADMIN")
		check(t, c, b, map[string]string{"JWT_SECRET": b.JWTSecret, "WORKER_JOIN_TOKEN": b.JoinToken})
	})
}
