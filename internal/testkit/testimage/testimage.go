// Package testimage gives tests a container image and the podman flags to
// run it (issue 27): a Debian bookworm minbase rootfs made by debootstrap
// (scripts/test-image.sh, cached in $RLSCHED_CACHE_DIR, which .ci/run
// builds in its install part), imported once into a podman store of its
// own under the cache dir. Podman as root in a VM needs flags a default
// install lacks (docs/API.md "Container images"): the vfs storage driver
// (no overlay on overlay), the file events backend (no journald), the
// cgroupfs manager (no systemd), and runc where the host has cgroup v1
// beside a cgroup2 mount with controllers (crun refuses such a "hybrid"
// host). Imported by tests only.
package testimage

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/toolbin"
)

// Marker is a file of the image, and its contents: what a run reads to
// show it runs in the image, not on the worker.
const (
	Marker         = "/etc/rlsched-test-image"
	MarkerContents = "rlsched-test-image bookworm"
)

var (
	once   sync.Once
	flags  []string
	name   string
	errMsg string
)

// Need returns podman's global flags and the image's name; it skips the
// test when podman or the image cannot be had, and fails it under
// CI=true.
func Need(t testing.TB) (globalFlags []string, image string) {
	t.Helper()
	once.Do(setUp)
	if errMsg != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the image tests need podman and debootstrap (.ci/run installs them): %s", errMsg)
		}
		t.Skip(errMsg)
	}
	return flags, name
}

func setUp() {
	if os.Geteuid() != 0 {
		errMsg = "not root: the worker's image runs need a root podman"
		return
	}
	podman, err := exec.LookPath("podman")
	if err != nil {
		errMsg = "no podman (Debian package podman)"
		return
	}
	root, err := toolbin.ModuleRoot()
	if err != nil {
		errMsg = err.Error()
		return
	}
	cache, err := toolbin.CacheDir()
	if err != nil {
		errMsg = err.Error()
		return
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "test-image.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		errMsg = "scripts/test-image.sh: " + err.Error() + ": " + lastLines(stderr.String())
		return
	}
	tar := strings.TrimSpace(string(out))
	store := filepath.Join(cache, "podman-test")
	flags = []string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"),
		"--storage-driver", "vfs", "--events-backend", "file", "--cgroup-manager", "cgroupfs"}
	if _, err := exec.LookPath("runc"); err == nil {
		flags = append(flags, "--runtime", "runc")
	}
	// The tag is the tarball's key: a new rootfs is a new image.
	key := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(tar), "test-image-"), ".tar")
	name = "localhost/rlsched-test:" + key
	if exec.Command(podman, append(flags, "image", "exists", name)...).Run() == nil {
		return
	}
	imp := exec.Command(podman, append(flags, "import", "--change",
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", tar, name)...)
	if b, err := imp.CombinedOutput(); err != nil {
		errMsg = "podman import: " + err.Error() + ": " + lastLines(string(b))
	}
}

func lastLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
