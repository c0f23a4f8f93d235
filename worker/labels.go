package worker

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
)

// A worker's labels (issue 28) are what a run's constraints match: the
// operator's (--label KEY=VALUE, WORKER_LABELS) and the automatic ones the
// worker sets itself (core.LabelGPUType and the others), sent in
// Hello.labels.

// Bounds of a label.
const (
	maxLabels = 64
)

// autoLabel reports whether key is one the worker sets itself.
func autoLabel(key string) bool {
	switch key {
	case core.LabelGPUType, core.LabelGPUCount, core.LabelCPUCount, core.LabelHost, core.LabelGPUSharing:
		return true
	}
	return false
}

// ParseLabel splits one --label argument, KEY=VALUE, and checks it.
func ParseLabel(kv string) (key, value string, err error) {
	key, value, ok := strings.Cut(kv, "=")
	if !ok {
		return "", "", fmt.Errorf("label %q: want KEY=VALUE", kv)
	}
	if err := checkLabel(key, value); err != nil {
		return "", "", err
	}
	return key, value, nil
}

// checkLabel: a key core.ValidLabelKey takes, not one of the automatic
// keys, and a printable value of at most core.MaxLabelValue bytes.
func checkLabel(key, value string) error {
	if !core.ValidLabelKey(key) {
		return fmt.Errorf("label key %q must match [a-z0-9._/-]{1,63}", key)
	}
	if autoLabel(key) {
		return fmt.Errorf("label %q is set by the worker itself (%s, %s, %s, %s, %s); choose another key", key,
			core.LabelGPUType, core.LabelGPUCount, core.LabelCPUCount, core.LabelHost, core.LabelGPUSharing)
	}
	if len(value) > core.MaxLabelValue {
		return fmt.Errorf("label %s: a value of %d bytes, at most %d", key, len(value), core.MaxLabelValue)
	}
	if !utf8.ValidString(value) || strings.IndexFunc(value, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("label %s: value %q has characters that are not printable", key, value)
	}
	return nil
}

// checkLabels checks the operator's labels (Config.Labels).
func checkLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return fmt.Errorf("cannot start worker: %d labels, at most %d", len(labels), maxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) { // the same config always gets the same error
		if err := checkLabel(k, labels[k]); err != nil {
			return fmt.Errorf("cannot start worker: %w", err)
		}
	}
	return nil
}

// helloLabels are the labels the worker sends: the operator's and the
// automatic ones; cores is how many cores runs may use.
func helloLabels(c Config, cores int) map[string]string {
	out := make(map[string]string, len(c.Labels)+4)
	maps.Copy(out, c.Labels)
	out[core.LabelGPUCount] = strconv.Itoa(len(c.GPUs))
	out[core.LabelCPUCount] = strconv.Itoa(cores)
	if c.Host != "" {
		out[core.LabelHost] = c.Host
	}
	// A synthetic GPU (--gpus N, no UUID) has no name nvidia-smi gave: a
	// type constraint must not match "gpu0".
	if len(c.GPUs) > 0 && c.GPUs[0].UUID != "" && c.GPUs[0].Name != "" {
		out[core.LabelGPUType] = c.GPUs[0].Name
	}
	if c.GPUSharing == SharingMPS {
		out[core.LabelGPUSharing] = SharingMPS
		if c.RunAs == RunAsUser {
			out[core.LabelGPUSharing] = core.SharingMPSPerUser
		}
	}
	return out
}
