package main

import (
	"errors"
	"testing"
)

// TestHelpIsNoError: --help of a server command is its answer (exit 0),
// not "flag: help requested" (issue 32); a bad flag stays a usage error.
func TestHelpIsNoError(t *testing.T) {
	for _, name := range []string{"up", "master", "gateway", "worker"} {
		if serverHelp[name] == "" {
			t.Errorf("%s has no help text", name)
		}
		var s string
		f := newFlags(name)
		f.str(&s, "x", "", "", "a flag")
		if err := f.parse([]string{"--help"}); !errors.Is(err, errHelp) {
			t.Errorf("%s --help: %v, want errHelp", name, err)
		}
		f = newFlags(name)
		f.SetOutput(discard{})
		var ue usageError
		if err := f.parse([]string{"--bogus"}); !errors.As(err, &ue) {
			t.Errorf("%s --bogus: %v, want a usage error", name, err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
