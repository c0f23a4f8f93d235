package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/rlsched/rlsched/worker"
)

// labelFlags collects repeated --label KEY=VALUE flags over WORKER_LABELS
// (KEY=VALUE[,KEY=VALUE...]); a flag given replaces the env's list.
type labelFlags struct {
	list  []string
	fromF bool
}

func (l *labelFlags) String() string { return strings.Join(l.list, ",") }

func (l *labelFlags) Set(v string) error {
	if !l.fromF {
		l.list, l.fromF = nil, true
	}
	if _, _, err := worker.ParseLabel(v); err != nil {
		return err
	}
	l.list = append(l.list, v)
	return nil
}

// labels adds --label, defaulting to WORKER_LABELS.
func (f envFlags) labels(l *labelFlags) {
	if v := os.Getenv("WORKER_LABELS"); v != "" {
		for _, kv := range strings.Split(v, ",") {
			if kv = strings.TrimSpace(kv); kv != "" {
				l.list = append(l.list, kv)
			}
		}
	}
	f.Var(l, "label", "a label of this worker, `KEY=VALUE` (repeatable), that runs' constraints match; key [a-z0-9._/-]{1,63}, value up to 128 printable bytes; gpu.type, gpu.count, cpu.count and hostname are set by the worker (env WORKER_LABELS, comma-separated)")
}

// labelMap parses the labels given; a key given twice is a mistake.
func (l *labelFlags) labelMap() (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range l.list {
		k, v, err := worker.ParseLabel(kv)
		if err != nil {
			return nil, usageError{err}
		}
		if old, dup := out[k]; dup && old != v {
			return nil, usageError{errLabelTwice(k, old, v)}
		}
		out[k] = v
	}
	return out, nil
}

func errLabelTwice(k, a, b string) error {
	return fmt.Errorf("label %s given twice, as %q and %q; give it once", k, a, b)
}
