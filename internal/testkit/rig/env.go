package rig

import (
	"os"
	"strings"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// serverSettings are the variables rlsched reads that a test's own
// environment must not pass on to the processes it starts.
var serverSettings = strings.Fields(`JWT_SECRET WORKER_JOIN_TOKEN MASTER_PORT RPC_PORT GATEWAY_PORT SQLITE_PATH
	LOG_DIR MYSQL_DSN REDIS_ADDR REDIS_PREFIX ARTIFACT_DIR LOG_FORMAT LOG_LEVEL WORKER_HB_TTL_SECONDS
	WORKER_TASK_TTL_SECONDS NACOS_ADDR NACOS_USERNAME NACOS_PASSWORD NACOS_NAMESPACE NACOS_GROUP SERVICE_NAME
	JWT_ENFORCE CANARY_USER_IDS CANARY_PERCENT FALLBACK_ENABLED FALLBACK_TIMEOUT_MS RATE_LIMIT_ENABLED
	RATE_LIMIT_WINDOW_SECONDS RATE_LIMIT_MAX_REQUESTS`)

// settingPrefixes start the names of further settings: rlsched's own, the
// gateway's, the artifact store's, and the chaos soak's (which only its
// runs may see, through an extra entry).
var settingPrefixes = []string{"RLSCHED_", "GATEWAY_", "ARTIFACT_", "CHAOS_"}

// ServerEnv is the test's environment minus every setting rlsched reads,
// plus JSON logs at info, then extra: later entries win in exec.
func ServerEnv(extra ...string) []string {
	drop := map[string]bool{}
	for _, k := range serverSettings {
		drop[k] = true
	}
	var env []string
next:
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] {
			continue
		}
		for _, p := range settingPrefixes {
			if strings.HasPrefix(k, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	// The workers' runs get the PATH a run under its own uid can reach.
	env = append(env, "PATH="+testutil.RunsPATH(os.Getenv("PATH")), "LOG_FORMAT=json", "LOG_LEVEL=info")
	return append(env, extra...)
}
