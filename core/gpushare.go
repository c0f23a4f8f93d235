package core

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Where a run may go (issue 28, API.md "Placement"): a fraction of one GPU,
// a GPU of a type or with enough memory, workers whose labels hold. A run's
// whole GPUs stay Task.GPUs, an int every rule counts; a fraction is
// Task.GPUFraction beside it (GPUs 0), so the code that counts whole GPUs
// (reservations, preemption, the simulator) is unchanged and a fractional
// run is, to it, a run of no whole GPU (docs/decisions.md "Issue 28").

// Bounds of the placement fields.
const (
	MaxGPUTypes     = 8
	MaxGPUTypeChars = 64
	MaxConstraints  = 16
	// A worker label: a key of [a-z0-9._/-]{1,63} (ValidLabelKey), a value
	// of at most MaxLabelValue bytes; a constraint past them matches none.
	MaxLabelValue = 128
	// MaxGPUMemoryMB is 16 TiB, far above any GPU: a bigger number is a
	// unit typed wrong.
	MaxGPUMemoryMB = 16 << 20
)

// Worker labels a worker sets itself (Hello.labels), beside --label k=v
// (API.md "Placement"). The master's placement matches on these exact
// keys, so they never change name.
const (
	LabelGPUType  = "gpu.type"  // the first GPU's name as nvidia-smi gives it; absent without real GPUs
	LabelGPUCount = "gpu.count" // how many GPUs the worker offers
	LabelCPUCount = "cpu.count" // the cores runs may use (RESERVED_CPUS taken off)
	LabelHost     = "host"      // the worker's host name (Hello.host)
	// LabelGPUSharing is "mps" under GPU_SHARING=mps, and SharingMPSPerUser
	// when its runs also have their user's uid (RUN_AS=user): an MPS server
	// serves one uid, so a shared GPU there serves one user's runs at a
	// time, and the placement keeps other users' fractions off it. Absent:
	// time-slicing, any runs share.
	LabelGPUSharing   = "gpu.sharing"
	SharingMPSPerUser = "mps-per-user"
)

var labelKeyRe = regexp.MustCompile(`^[a-z0-9._/-]{1,63}$`)

// CheckGPUs splits a request of gpus into whole GPUs and a fraction of one:
// an integer ≥ 0, or 0 < f < 1 with at most two decimals. What is wrong
// is a sentence to follow "gpus ".
func CheckGPUs(gpus float64, maxWhole int) (whole int, fraction float64, err error) {
	switch {
	case math.IsNaN(gpus) || math.IsInf(gpus, 0):
		return 0, 0, fmt.Errorf("must be a number")
	case gpus < 0:
		return 0, 0, fmt.Errorf("must be 0 or more: a whole number of GPUs, or a fraction of one such as 0.25")
	case gpus == math.Trunc(gpus):
		if gpus > float64(maxWhole) {
			return 0, 0, fmt.Errorf("must be 0..%d", maxWhole)
		}
		return int(gpus), 0, nil
	case gpus > 1:
		return 0, 0, fmt.Errorf("%g is not supported: a run gets a fraction of one GPU (below 1, such as 0.5) or whole GPUs, not both", gpus)
	}
	h := math.Round(gpus * 100)
	if math.Abs(gpus*100-h) > 1e-6 || h < 1 || h > 99 {
		return 0, 0, fmt.Errorf("%g has more than two decimals: a fraction of a GPU is in hundredths (0.25, 0.5)", gpus)
	}
	return 0, h / 100, nil
}

// GPUCount is what t asks for in GPUs: its whole GPUs or its fraction.
func (t *Task) GPUCount() float64 { return float64(t.GPUs) + t.GPUFraction }

// GPUHundredths is t's GPUs in hundredths of a GPU (a whole GPU is 100).
func (t *Task) GPUHundredths() int { return t.GPUs*100 + int(math.Round(t.GPUFraction*100)) }

// Fractional reports whether t asks for a share of one GPU.
func (t *Task) Fractional() bool { return t.GPUFraction > 0 }

// UsesGPU reports whether t asks for any GPU, whole or shared.
func (t *Task) UsesGPU() bool { return t.GPUs > 0 || t.GPUFraction > 0 }

// GPUShareMB is the GPU memory a fractional t gets on a GPU of memoryMB:
// what it asked for (gpuMemoryMb), else its fraction of the GPU's memory
// (0 when the GPU's memory is not known).
func (t *Task) GPUShareMB(memoryMB int64) int64 {
	if t.GPUMemoryMB > 0 {
		return t.GPUMemoryMB
	}
	return int64(math.Floor(t.GPUFraction * float64(max(memoryMB, 0))))
}

// FormatGPUs writes a request of GPUs for a person: "0.25 GPU", "1 GPU",
// "2 GPUs".
func FormatGPUs(gpus float64) string {
	if gpus == 1 || (gpus > 0 && gpus < 1) {
		return fmt.Sprintf("%g GPU", gpus)
	}
	return fmt.Sprintf("%g GPUs", gpus)
}

// CheckGPUType cleans a list of GPU type names: 1..MaxGPUTypes names of
// 1..MaxGPUTypeChars characters, blanks trimmed.
func CheckGPUType(types []string) ([]string, error) {
	if len(types) > MaxGPUTypes {
		return nil, fmt.Errorf("at most %d names", MaxGPUTypes)
	}
	out := make([]string, 0, len(types))
	for _, n := range types {
		n = strings.TrimSpace(n)
		if n == "" || utf8.RuneCountInString(n) > MaxGPUTypeChars || strings.IndexByte(n, 0) >= 0 {
			return nil, fmt.Errorf("each name must be 1..%d characters of the GPU's name as nvidia-smi gives it (such as A100)", MaxGPUTypeChars)
		}
		out = append(out, n)
	}
	return out, nil
}

// MatchGPUType reports whether a GPU named name is one of types: a
// case-insensitive substring of its name ("a100" matches "NVIDIA
// A100-SXM4-80GB"). No types: any GPU.
func MatchGPUType(name string, types []string) bool {
	if len(types) == 0 {
		return true
	}
	name = strings.ToLower(name)
	for _, t := range types {
		if strings.Contains(name, strings.ToLower(t)) {
			return true
		}
	}
	return false
}

// CheckConstraints says what is wrong with constraints on worker labels:
// {"pool": "a100"} (the label must be a100) and {"!pool": "interactive"}
// (it must not be: a worker without the label passes). The error names
// the key.
func CheckConstraints(c map[string]string) error {
	if len(c) > MaxConstraints {
		return fmt.Errorf("at most %d constraints", MaxConstraints)
	}
	for k, v := range c {
		key := strings.TrimPrefix(k, "!")
		if !labelKeyRe.MatchString(key) {
			return fmt.Errorf("key %q must be a label name (1..63 of [a-z0-9._/-]), with a leading ! for \"must not be\"", clipKey(k))
		}
		if len(v) > MaxLabelValue || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("%s: the value must be at most %d bytes", key, MaxLabelValue)
		}
	}
	return nil
}

// ValidLabelKey reports whether k may name a worker label.
func ValidLabelKey(k string) bool { return labelKeyRe.MatchString(k) }

func clipKey(k string) string {
	if len(k) > 64 {
		return k[:64]
	}
	return k
}

// MatchConstraints reports whether labels hold every constraint of c.
func MatchConstraints(labels, c map[string]string) bool {
	for k, v := range c {
		if key, not := strings.CutPrefix(k, "!"); not {
			if got, ok := labels[key]; ok && got == v {
				return false
			}
		} else if labels[k] != v {
			return false
		}
	}
	return true
}

// taskJSON is Task without its methods, so MarshalJSON can embed it.
type taskJSON Task

// MarshalJSON writes t as API.md's Task: "gpus" is its whole GPUs or its
// fraction (GPUCount).
func (t Task) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		taskJSON
		Nodes int     `json:"nodes"`
		GPUs  float64 `json:"gpus"`
	}{taskJSON(t), t.Group(), t.GPUCount()})
}

// UnmarshalJSON reads API.md's Task, "gpus" a fraction or whole GPUs.
func (t *Task) UnmarshalJSON(b []byte) error {
	v := struct {
		*taskJSON
		GPUs float64 `json:"gpus"`
	}{taskJSON: (*taskJSON)(t)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	t.GPUs, t.GPUFraction = int(v.GPUs), 0
	if f := v.GPUs - math.Trunc(v.GPUs); f > 0 {
		t.GPUFraction = math.Round(f*100) / 100
	}
	return nil
}
