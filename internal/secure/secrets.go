package secure

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// SecretEnv names the environment variables that hold rlsched's secrets. A
// run must never inherit them: with the join token (or a worker's key) a
// user could join as a worker and forge its reports; with the JWT secret
// mint an admin token.
var SecretEnv = []string{"WORKER_JOIN_TOKEN", "WORKER_KEY", "JWT_SECRET", "GATEWAY_SHARED_SECRET",
	"MYSQL_DSN", "NACOS_PASSWORD", "REDIS_PASSWORD", "ARTIFACT_S3_SECRET_KEY"}

// IsSecretEnv reports whether the variable name holds a secret.
func IsSecretEnv(name string) bool {
	for _, s := range SecretEnv {
		if s == name {
			return true
		}
	}
	return false
}

// ScrubEnv removes every SecretEnv variable from this process's environment,
// so that processes it starts (the worker's guard, runs) do not inherit them.
// Call it once the secrets are read. It does not change
// /proc/<pid>/environ, which keeps the environment the process started
// with: NoDump hides that.
func ScrubEnv() {
	for _, k := range SecretEnv {
		os.Unsetenv(k)
	}
}

// maxSecretFile bounds what ReadSecretFile reads: a token is a line.
const maxSecretFile = 64 << 10

// ReadSecretFile reads a secret (surrounding whitespace dropped) from path,
// which must be a regular file of this uid (or root) that nobody else may
// read or write (mode 0600 or 0400). A symlink is followed: the file it
// names is checked.
func ReadSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("cannot open secret file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat() // the file opened, not whatever the path names now
	if err != nil {
		return "", fmt.Errorf("cannot check secret file %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("secret file %s is not a regular file", path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return "", fmt.Errorf("secret file %s is owned by uid %d, not by this uid (%d) or root: chown %d %s",
			path, sys.Uid, os.Geteuid(), os.Geteuid(), path)
	}
	if p := st.Mode().Perm(); p&0o077 != 0 {
		return "", fmt.Errorf("secret file %s has mode %04o, so others can read or change it: chmod 600 %s", path, p, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("cannot read secret file %s: %w", path, err)
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("secret file %s is over %d bytes: it should hold one token", path, maxSecretFile)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "", errors.New("secret file " + path + " is empty")
	}
	return string(b), nil
}
