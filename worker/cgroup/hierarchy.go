package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The v1 controllers a run's group uses. The first five are needed for
// enforcement; cpuacct (CPU seconds) and freezer (a kill no fork escapes)
// are used where mounted.
var (
	v1Needed   = []string{"memory", "cpu", "cpuset", "pids", "devices"}
	v1Optional = []string{"cpuacct", "freezer"}
	// v2Needed are enabled in the parent's cgroup.subtree_control; devices
	// are a BPF program, not a controller.
	v2Needed = []string{"cpu", "cpuset", "memory", "pids"}
)

// Hierarchy is where this process's control groups are: per v1
// controller, the directory of its own group in that controller's mount;
// for v2, the directory of its own group in the cgroup2 mount.
type Hierarchy struct {
	// Version is 1 when the v1 memory controller is mounted (a v1 or hybrid
	// host: the controllers live there even beside a cgroup2 mount), 2 for
	// a unified host, 0 when neither is found.
	Version int
	V1      map[string]string
	// V1Path is, per v1 controller, this process's group as
	// /proc/self/cgroup names it (the path a container runtime's
	// --cgroup-parent takes); nil: "/" for each.
	V1Path map[string]string
	V2     string
	// V2Path is this process's v2 group as /proc/self/cgroup names it.
	V2Path string
	// V2Root: V2 is its namespace's root group, which may hold processes
	// and children with controllers at once.
	V2Root bool
}

// Detect reads /proc/self/mountinfo and /proc/self/cgroup.
func Detect() (*Hierarchy, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cannot read the mounts: %w", err)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cannot read this process's control groups: %w", err)
	}
	return parseHierarchy(mi, cg), nil
}

// parseHierarchy is Detect for the contents of mountinfo and cgroup.
func parseHierarchy(mountinfo, cgroup []byte) *Hierarchy {
	type mount struct{ root, dir string }
	v1 := map[string]mount{} // controller → its mount
	var v2 *mount
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mount{root: unescape(f[3]), dir: unescape(f[4])}
		switch g[0] {
		case "cgroup2":
			if v2 == nil {
				v2 = &m
			}
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				if _, seen := v1[opt]; !seen {
					v1[opt] = m
				}
			}
		}
	}
	h := &Hierarchy{V1: map[string]string{}, V1Path: map[string]string{}}
	sc = bufio.NewScanner(bytes.NewReader(cgroup))
	for sc.Scan() {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := parts[2]
		if parts[0] == "0" && parts[1] == "" {
			if v2 != nil {
				rel := within(path, v2.root)
				h.V2, h.V2Root, h.V2Path = filepath.Join(v2.dir, rel), rel == "/", path
			}
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if m, ok := v1[c]; ok {
				h.V1[c] = filepath.Join(m.dir, within(path, m.root))
				h.V1Path[c] = path
			}
		}
	}
	switch {
	case h.V1["memory"] != "":
		h.Version = 1
	case h.V2 != "":
		h.Version = 2
	}
	return h
}

// within is path relative to a mount whose root is root (a cgroup
// namespace or a bind mount shows a subtree).
func within(path, root string) string {
	if root == "/" || root == "" {
		return path
	}
	if rel, ok := strings.CutPrefix(path, root); ok && (rel == "" || rel[0] == '/') {
		return "/" + strings.TrimPrefix(rel, "/")
	}
	return path
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
