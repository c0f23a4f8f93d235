package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// upServerFile is ConfigDir/up.json: the URL the last `rlsched up` of this
// user printed. It is the CLI's default server while neither --server,
// RLSCHED_SERVER nor a saved login names another, so that `make run` and the
// commands typed beside it use one URL (the gateway's), on whatever ports up
// listens.
const upServerFile = "up.json"

type upServer struct {
	Server  string `json:"server"`
	DataDir string `json:"dataDir,omitempty"`
}

// RememberUp records url as the default server of this user's CLI (see
// upServerFile) and returns the file's path and a forget that removes it
// again, unless a later up wrote its own meanwhile.
func RememberUp(url, dataDir string) (path string, forget func(), err error) {
	env := Env{}.withDefaults()
	if env.ConfigDir == "" {
		return "", func() {}, errors.New("no config directory (set RLSCHED_CONFIG_DIR)")
	}
	path = filepath.Join(env.ConfigDir, upServerFile)
	b, _ := json.Marshal(upServer{Server: url, DataDir: dataDir})
	if err := os.MkdirAll(env.ConfigDir, 0o700); err != nil {
		return "", func() {}, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return "", func() {}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", func() {}, err
	}
	return path, func() {
		if s, _ := readUpServer(path); s == url {
			os.Remove(path)
		}
	}, nil
}

func readUpServer(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var u upServer
	if err := json.Unmarshal(b, &u); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return u.Server, nil
}

// upDefault is the server the running `rlsched up` of this user printed,
// or "" when there is none.
func (inv *invocation) upDefault() string {
	if inv.env.ConfigDir == "" {
		return ""
	}
	s, _ := readUpServer(filepath.Join(inv.env.ConfigDir, upServerFile))
	return s
}
