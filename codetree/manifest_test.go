package codetree

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func sum(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func link(p, target string) File {
	return File{Path: p, Mode: ModeSymlink, Size: int64(len(target)), SHA256: sum(target), Target: target}
}

func file(p string) File { return File{Path: p, Mode: ModeFile, Size: 1, SHA256: sum("x")} }

func TestCheck(t *testing.T) {
	ok := func(files ...File) {
		t.Helper()
		m := Manifest{Files: files}
		if err := m.Check(DefaultLimits); err != nil {
			t.Fatalf("%v: %v", files, err)
		}
	}
	bad := func(want string, files ...File) {
		t.Helper()
		m := Manifest{Files: files}
		if err := m.Check(DefaultLimits); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%v: %v, want an error with %q", files, err, want)
		}
	}
	ok(file("a"), link("d/l", "../a"), link("d/self", "."), link("dangling", "nope/x"))
	ok(link("d/c", ".."), link("e", "d/c/d")) // d/c is the root: d/c/d is d
	bad("outside", link("a", "/etc/passwd"))
	bad("outside", link("a", ".."))
	bad("outside", link("d/c", ".."), link("a", "d/c/..")) // through d/c: the root's parent
	bad("outside", link("x", "y/.."), link("y", "../z"))
	bad("more than", link("a", "b"), link("b", "a"))
	bad("clean", file("a/../b"))
	bad("clean", file("./a"))
	bad("relative", file("/a"))
	bad("twice", file("a"), file("a"))
	bad("below", link("d", "e"), file("d/x"))
	bad("mode", File{Path: "m", Mode: "100777", Size: 1, SHA256: sum("x")})
	bad("target", File{Path: "l", Mode: ModeSymlink, Size: 1, SHA256: sum("x"), Target: "y"})
	bad("chunks", File{Path: "big", Mode: ModeFile, Size: ChunkSize + 1, SHA256: sum("x")})
	m := Manifest{Files: []File{file("a"), file("b")}}
	if err := m.Check(Limits{MaxFiles: 1}); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "CODE_MAX_FILES") {
		t.Fatalf("over CODE_MAX_FILES: %v", err)
	}
}

func TestEncodeIsCanonical(t *testing.T) {
	a := Manifest{Files: []File{file("b"), file("a")}}
	b := Manifest{Files: []File{file("a"), file("b")}}
	if Hash(a.Encode()) != Hash(b.Encode()) {
		t.Fatal("the order of the files changed the tree hash")
	}
	if got, err := Decode(b.Encode(), Hash(a.Encode())); err != nil || len(got.Files) != 2 {
		t.Fatalf("decode: %v %v", got, err)
	}
	if _, err := Decode(b.Encode(), sum("other")); err == nil {
		t.Fatal("a manifest that does not hash to its tree")
	}
	if e := (&Manifest{}).Encode(); string(e) != `{"files":[]}` {
		t.Fatalf("empty tree: %s", e)
	}
}
