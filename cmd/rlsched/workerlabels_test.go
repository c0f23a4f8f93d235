package main

import (
	"maps"
	"strings"
	"testing"
)

// --label is repeatable and replaces WORKER_LABELS; a bad one is a usage
// error naming it.
func TestWorkerLabels(t *testing.T) {
	parse := func(env string, args ...string) (map[string]string, error) {
		t.Helper()
		t.Setenv("WORKER_LABELS", env)
		var o workerOpts
		f := newFlags("worker")
		o.define(f)
		if err := f.parse(args); err != nil {
			return nil, err
		}
		return o.labels.labelMap()
	}
	f := func(env string, args []string, want map[string]string) {
		t.Helper()
		got, err := parse(env, args...)
		if err != nil || !maps.Equal(got, want) {
			t.Fatalf("env %q args %v: %v %v, want %v", env, args, got, err, want)
		}
	}
	f("", nil, map[string]string{})
	f("pool=a100, zone=b", nil, map[string]string{"pool": "a100", "zone": "b"})
	f("pool=a100", []string{"--label", "pool=rtx", "--label", "team=rl"}, map[string]string{"pool": "rtx", "team": "rl"})

	bad := func(env string, args []string, want string) {
		t.Helper()
		if _, err := parse(env, args...); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("env %q args %v: %v, want %q", env, args, err, want)
		}
	}
	bad("", []string{"--label", "Pool=a"}, "must match [a-z0-9._/-]")
	bad("", []string{"--label", "gpu.count=9"}, "set by the worker itself")
	bad("pool", nil, `label "pool": want KEY=VALUE`)
	bad("", []string{"--label", "a=1", "--label", "a=2"}, "label a given twice")
}
