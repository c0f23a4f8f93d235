package codecache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codetree"
)

// blobSource is the master's side of FetchCode: blobs by sha256, counted.
type blobSource struct {
	blobs   map[string][]byte
	fetched int
	corrupt string // a blob served with other bytes
}

func (s *blobSource) FetchCode(sum string, size int64, w io.Writer) (int64, error) {
	b, ok := s.blobs[sum]
	if !ok {
		return 0, errors.New("no such blob")
	}
	s.fetched++
	if sum == s.corrupt {
		b = append([]byte("x"), b[1:]...)
	}
	n, err := w.Write(b)
	return int64(n), err
}

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// tree stores files (path → content; a "->" prefix makes a symlink, a
// "+x " prefix an executable) in src and returns the tree hash.
func tree(t *testing.T, src *blobSource, files map[string]string) string {
	t.Helper()
	var m codetree.Manifest
	for p, c := range files {
		f := codetree.File{Path: p, Mode: codetree.ModeFile}
		switch {
		case strings.HasPrefix(c, "->"):
			f.Mode, f.Target = codetree.ModeSymlink, c[2:]
			c = f.Target
		case strings.HasPrefix(c, "+x "):
			f.Mode, c = codetree.ModeExec, c[3:]
		}
		f.Size, f.SHA256 = int64(len(c)), hexSum([]byte(c))
		if f.Mode != codetree.ModeSymlink {
			if len(c) > codetree.ChunkSize {
				for off := 0; off < len(c); off += codetree.ChunkSize {
					ch := []byte(c[off:min(off+codetree.ChunkSize, len(c))])
					f.Chunks = append(f.Chunks, hexSum(ch))
					src.blobs[hexSum(ch)] = ch
				}
			} else {
				src.blobs[f.SHA256] = []byte(c)
			}
		}
		m.Files = append(m.Files, f)
	}
	if err := m.Check(codetree.Limits{}); err != nil {
		t.Fatal(err)
	}
	enc := m.Encode()
	src.blobs[codetree.Hash(enc)] = enc
	var pack []byte
	for _, b := range codetree.Pack(&m) {
		pack = append(pack, src.blobs[b.SHA256]...)
	}
	src.blobs[codetree.Hash(enc)+codetree.PackSuffix] = pack
	return codetree.Hash(enc)
}

func TestMaterialize_LinksTheRunCannotChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the copy belongs to another uid")
	}
	c, err := Open(filepath.Join(t.TempDir(), "code"), 0, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	src := &blobSource{blobs: map[string][]byte{}}
	big := strings.Repeat("0123456789", 150000) // 1.5 MB: two chunks
	h := tree(t, src, map[string]string{"train.py": "print(1)\n", "bin/run.sh": "+x #!/bin/sh\necho hi\n",
		"exp/cfg": "lr: 1\n", "exp/link": "->../train.py", "data/big": big})
	tr, err := c.Acquire(h, src)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(h)
	// Under /tmp itself: the test's own temporary dir is 0700, which the
	// run's uid could not enter.
	priv, err := os.MkdirTemp("", "codecache")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(priv) })
	if err := os.Chmod(priv, 0o755); err != nil {
		t.Fatal(err)
	}
	const uid = 64123
	o := &Owner{UID: uid, GID: uid, Link: true}
	cp, err := c.Materialize(tr, filepath.Join(priv, "code"), o)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Linked != 4 {
		t.Fatalf("linked %d files, want 4", cp.Linked)
	}
	if b, _ := os.ReadFile(filepath.Join(cp.Dir, "data/big")); string(b) != big {
		t.Fatal("data/big differs")
	}
	if target, _ := os.Readlink(filepath.Join(cp.Dir, "exp/link")); target != "../train.py" {
		t.Fatalf("exp/link -> %q", target)
	}
	if st, _ := os.Stat(filepath.Join(cp.Dir, "bin/run.sh")); st.Mode().Perm()&0o111 == 0 {
		t.Fatal("bin/run.sh lost its x bit")
	}
	sh := func(script string) error {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = filepath.Join(cp.Dir, "exp")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(err.Error() + ": " + string(out))
		}
		return nil
	}
	// In place: refused. Replaced: fine, and the cache keeps its bytes.
	if err := sh("echo changed >> ../train.py"); err == nil || !strings.Contains(err.Error(), "ermission denied") {
		t.Fatalf("the run's uid wrote into a hard link to the cache: %v", err)
	}
	if err := sh("chmod 666 ../train.py"); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Fatalf("the run's uid changed a cached file's mode: %v", err)
	}
	if err := sh("set -e; echo new > t; mv t ../train.py; echo more > cfg.new; mkdir d"); err != nil {
		t.Fatalf("replacing a file of its copy: %v", err)
	}
	if b, _ := os.ReadFile(c.blobPath(hexSum([]byte("print(1)\n")), codetree.ModeFile)); string(b) != "print(1)\n" {
		t.Fatalf("the cache's train.py is now %q", b)
	}
	// The same tree again: nothing fetched; a copy for the worker's own uid.
	n := src.fetched
	tr2, err := c.Acquire(h, src)
	if err != nil {
		t.Fatal(err)
	}
	c.Release(h)
	if src.fetched != n {
		t.Fatalf("a cached tree fetched %d blobs", src.fetched-n)
	}
	cp2, err := c.Materialize(tr2, filepath.Join(priv, "code2"), nil)
	if err != nil || cp2.Linked != 0 {
		t.Fatalf("copy: %v, %d linked", err, cp2.Linked)
	}
	if err := os.WriteFile(filepath.Join(cp2.Dir, "train.py"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(c.blobPath(hexSum([]byte("print(1)\n")), codetree.ModeFile)); string(b) != "print(1)\n" {
		t.Fatalf("writing a copy changed the cache: %q", b)
	}
	if d, err := Subdir(cp, "exp", o); err != nil || d != filepath.Join(cp.Dir, "exp") {
		t.Fatalf("subdir: %q %v", d, err)
	}
	if _, err := Subdir(cp, "exp/cfg", o); err == nil {
		t.Fatal("a file as the subdir")
	}
}

func TestAcquire_BadBytesAndEviction(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "code")
	c, err := Open(dir, 10, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	src := &blobSource{blobs: map[string][]byte{}}
	a := tree(t, src, map[string]string{"a.py": "aaaaaaaa", "shared.py": "ssss"})
	src.corrupt = hexSum([]byte("aaaaaaaa"))
	if _, err := c.Acquire(a, src); err == nil || !strings.Contains(err.Error(), "a.py") {
		t.Fatalf("a blob with other bytes: %v; want an error naming a.py", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "manifests", a)); err == nil {
		t.Fatal("a tree that failed its fetch is cached")
	}
	src.corrupt = ""
	if _, err := c.Acquire(a, src); err != nil {
		t.Fatal(err)
	}
	c.Release(a)
	// b fits the 10 bytes only without a's own file.
	b := tree(t, src, map[string]string{"b.py": "bb", "shared.py": "ssss"})
	if _, err := c.Acquire(b, src); err != nil {
		t.Fatal(err)
	}
	c.Release(b)
	if _, err := os.Stat(filepath.Join(dir, "manifests", a)); err == nil {
		t.Fatal("the least recently used tree was kept past the limit")
	}
	for name, want := range map[string]bool{hexSum([]byte("aaaaaaaa")): false, hexSum([]byte("ssss")): true, hexSum([]byte("bb")): true} {
		_, err := os.Stat(filepath.Join(dir, "blobs", name))
		if (err == nil) != want {
			t.Fatalf("blob %s present %v, want %v", name, err == nil, want)
		}
	}
	// Many files missing: one pack, checked file by file.
	many := map[string]string{}
	for i := range 20 {
		many[fmt.Sprintf("m/f%02d.py", i)] = fmt.Sprint("file ", i)
	}
	many["m/shared.py"] = "ssss"
	mt := tree(t, src, many)
	n := src.fetched
	if _, err := c.Acquire(mt, src); err != nil {
		t.Fatal(err)
	}
	c.Release(mt)
	if got := src.fetched - n; got != 2 {
		t.Fatalf("a 21-file tree took %d fetches; want 2 (the manifest, the pack)", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "blobs", hexSum([]byte("file 7")))); err != nil || string(b) != "file 7" {
		t.Fatalf("a file of the pack: %q %v", b, err)
	}
	mt2 := tree(t, src, map[string]string{"z/a": "1", "z/b": "2", "z/c": "3", "z/d": "4", "z/e": "5", "z/f": "6", "z/g": "7", "z/h": "8"})
	src.corrupt = mt2 + codetree.PackSuffix
	if _, err := c.Acquire(mt2, src); err == nil || !strings.Contains(err.Error(), "z/a") {
		t.Fatalf("a pack with other bytes: %v; want an error naming z/a", err)
	}
	if _, err := c.Acquire(strings.Repeat("0", 64), src); err == nil {
		t.Fatal("an unknown tree")
	}
	if _, err := c.Acquire("../x", src); err == nil {
		t.Fatal("a tree hash that is a path")
	}
	_ = bytes.MinRead
}

// TestAcquire_RefusesAManifestThatLeavesTheTree: the worker checks a
// manifest itself (its hash proves only that it is the tree asked for): a
// path with "..", an absolute one, a symlink out of the tree or a file
// below a symlink fails the fetch, naming the path, and nothing is
// written outside the cache or cached.
func TestAcquire_RefusesAManifestThatLeavesTheTree(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "code")
	c, err := Open(dir, 1<<20, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	src := &blobSource{blobs: map[string][]byte{}}
	body := []byte("owned\n")
	src.blobs[hexSum(body)] = body
	file := func(p string) codetree.File {
		return codetree.File{Path: p, Mode: codetree.ModeFile, Size: int64(len(body)), SHA256: hexSum(body)}
	}
	link := func(p, target string) codetree.File {
		return codetree.File{Path: p, Mode: codetree.ModeSymlink, Size: int64(len(target)), SHA256: hexSum([]byte(target)), Target: target}
	}
	for _, c2 := range []struct {
		files []codetree.File
		want  string
	}{
		{[]codetree.File{file("../../evil")}, "../../evil"},
		{[]codetree.File{file(filepath.Join(base, "abs-evil"))}, filepath.Join(base, "abs-evil")},
		{[]codetree.File{link("out", "../..")}, "out"},
		{[]codetree.File{link("d", base), file("d/evil")}, "d"},
	} {
		// Encoded by hand: Encode sorts and cleans nothing, and the hash
		// is of these bytes, as a hostile master would send them.
		enc, err := json.Marshal(codetree.Manifest{Files: c2.files})
		if err != nil {
			t.Fatal(err)
		}
		tree := codetree.Hash(enc)
		src.blobs[tree] = enc
		if _, err := c.Acquire(tree, src); err == nil || !strings.Contains(err.Error(), c2.want) {
			t.Fatalf("%v: %v; want a refusal naming %q", c2.files, err, c2.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "manifests", tree)); err == nil {
			t.Fatalf("%v: the tree was cached", c2.files)
		}
	}
	for _, p := range []string{filepath.Join(base, "evil"), filepath.Join(base, "abs-evil"), filepath.Join(base, "d", "evil")} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s was written", p)
		}
	}
}
