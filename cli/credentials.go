package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// credentials is ConfigDir/credentials.json, written by login.
type credentials struct {
	Server    string `json:"server"`
	Token     string `json:"token"`
	Username  string `json:"username"`
	ExpiresAt string `json:"expiresAt,omitempty"`
}

const credentialsFile = "credentials.json"

func (inv *invocation) credentialsPath() (string, error) {
	if inv.env.ConfigDir == "" {
		return "", errors.New("cannot find a config directory: set RLSCHED_CONFIG_DIR")
	}
	return filepath.Join(inv.env.ConfigDir, credentialsFile), nil
}

// loadCredentials returns the saved login, or nil when there is none. A file
// that cannot be read or parsed is reported on stderr and treated as absent.
func (inv *invocation) loadCredentials() *credentials {
	path, err := inv.credentialsPath()
	if err != nil {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			inv.errorf("warning: cannot read %s: %v", path, err)
		}
		return nil
	}
	var c credentials
	if err := json.Unmarshal(b, &c); err != nil {
		inv.errorf("warning: ignoring %s: %v; run `rlsched login -u NAME` again", path, err)
		return nil
	}
	if runtime.GOOS != "windows" {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			inv.errorf("warning: %s is readable by others (mode %04o): run `chmod 600 %s`",
				path, st.Mode().Perm(), path)
		}
	}
	return &c
}

// saveCredentials writes c with mode 0600 (directory 0700), atomically.
func (inv *invocation) saveCredentials(c credentials) (string, error) {
	path, err := inv.credentialsPath()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("cannot create %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".credentials-*.json") // mode 0600
	if err != nil {
		return "", fmt.Errorf("cannot save credentials in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil && runtime.GOOS != "windows" {
		tmp.Close()
		return "", fmt.Errorf("cannot save credentials: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return "", fmt.Errorf("cannot save credentials: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("cannot save credentials: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("cannot save credentials: %w", err)
	}
	return path, nil
}

// removeCredentials deletes the saved login; removed=false when there was none.
func (inv *invocation) removeCredentials() (removed bool, err error) {
	path, err := inv.credentialsPath()
	if err != nil {
		return false, err
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("cannot remove %s: %w", path, err)
	}
	return true, nil
}
