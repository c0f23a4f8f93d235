package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

// Cluster is what rlsched sim simulates the runs on: its workers, their
// owners' quotas, and an optional schedule of node faults. Its file is
// JSON (docs/sim.md, "The cluster file"):
//
//	{"workers": [{"id": "dgx", "count": 4, "gpus": 8, "gpuType": "A100", "gpuMemoryMb": 81920,
//	              "slots": 4, "cores": 64, "memoryMb": 524288, "labels": {"rack": "a"}}],
//	 "quotas": {"alice": {"gpus": 8}},
//	 "faults": [{"worker": "dgx-2", "at": "36h", "for": "2h"}]}
type Cluster struct {
	Workers []WorkerSpec   `json:"workers"`
	Quotas  map[string]Cap `json:"quotas,omitempty"`
	Faults  []Fault        `json:"faults,omitempty"`
}

// WorkerSpec is one worker of the cluster file, or Count alike (named
// ID-1 … ID-Count). GPUs is how many; a worker whose GPUs differ lists
// them one by one in GPUList instead (each with its name and memory, else
// GPUType and GPUMemoryMB for all). Cores and MemoryMB are what it offers
// runs (0: not said, as a worker that reports none: unlimited), Labels
// what runs' constraints match.
type WorkerSpec struct {
	ID          string            `json:"id"`
	Count       int               `json:"count,omitempty"`
	GPUs        int               `json:"gpus,omitempty"`
	GPUType     string            `json:"gpuType,omitempty"`
	GPUMemoryMB int64             `json:"gpuMemoryMb,omitempty"`
	GPUList     []core.GPU        `json:"gpuList,omitempty"`
	Slots       int               `json:"slots"`
	Cores       int               `json:"cores,omitempty"`
	MemoryMB    int64             `json:"memoryMb,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// Cap is a user's quota in the cluster file; nil fields: no cap.
type Cap struct {
	GPUs *int `json:"gpus,omitempty"`
	Runs *int `json:"runs,omitempty"`
}

// Fault takes Worker down At after the trace's first submission, For
// long (zero: for good); its runs lose their work since their last
// checkpoint and are queued again.
type Fault struct {
	Worker string   `json:"worker"`
	At     Duration `json:"at"`
	For    Duration `json:"for,omitempty"`
}

// Duration is a time.Duration written as Go writes one ("36h", "90s").
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"90s\" or \"36h\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("bad duration %q: write one such as \"90s\" or \"36h\"", s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// node is one worker the simulation runs: its GPUs (indices) and slots.
type node struct {
	id     string
	gpus   []int
	models []core.GPU // by position in gpus: names and memory
	slots  int
	// cpuMillis and memoryMB are what it offers (0: not said, unlimited).
	cpuMillis, memoryMB int64
	labels              map[string]string
}

// maxClusterWorkers bounds a cluster file's workers (after Count).
const maxClusterWorkers = 1_000_000

// ReadCluster decodes and checks a cluster file. Unknown fields are an
// error (a misspelt "gpu" would otherwise simulate a cluster of CPUs).
func ReadCluster(r io.Reader) (*Cluster, error) {
	dec := json.NewDecoder(io.LimitReader(r, 64<<20))
	dec.DisallowUnknownFields()
	var c Cluster
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("cannot read the cluster file: %w", err)
	}
	if _, err := c.nodes(); err != nil {
		return nil, err
	}
	return &c, nil
}

// FromWorkers is the cluster of a live master's workers (GET /api/workers):
// every worker it lists that is not DOWN, with its GPUs and slots.
func FromWorkers(ws []core.WorkerInfo) *Cluster {
	c := &Cluster{}
	for _, w := range ws {
		if w.State == core.WorkerDown {
			continue
		}
		gpus := make([]core.GPU, len(w.GPUs))
		for i, g := range w.GPUs {
			gpus[i] = core.GPU{Index: g.Index, Name: g.Name, MemoryMB: g.MemoryMB}
		}
		c.Workers = append(c.Workers, WorkerSpec{ID: w.ID, GPUList: gpus, Slots: w.Slots, Cores: int(w.CPUs),
			MemoryMB: w.MemoryMB, Labels: w.Labels})
	}
	return c
}

// nodes expands the workers, sorted by id (the planner's order among
// equals), and checks them and the faults.
func (c *Cluster) nodes() ([]node, error) {
	var out []node
	seen := map[string]bool{}
	add := func(id string, w WorkerSpec) error {
		if seen[id] {
			return fmt.Errorf("cannot read the cluster file: two workers are named %q", id)
		}
		seen[id] = true
		n := node{id: id, slots: w.Slots, cpuMillis: int64(w.Cores) * 1000, memoryMB: w.MemoryMB, labels: w.Labels}
		if len(w.GPUList) > 0 {
			for _, g := range w.GPUList {
				n.gpus = append(n.gpus, g.Index)
				n.models = append(n.models, g)
			}
		} else {
			for i := range w.GPUs {
				n.gpus = append(n.gpus, i)
				n.models = append(n.models, core.GPU{Index: i, Name: w.GPUType, MemoryMB: w.GPUMemoryMB})
			}
		}
		out = append(out, n)
		if len(out) > maxClusterWorkers {
			return fmt.Errorf("cannot read the cluster file: more than %d workers", maxClusterWorkers)
		}
		return nil
	}
	for i, w := range c.Workers {
		switch {
		case strings.TrimSpace(w.ID) == "":
			return nil, fmt.Errorf("cannot read the cluster file: worker %d has no id", i+1)
		case w.GPUs < 0 || w.Slots < 0 || w.Count < 0 || w.Cores < 0 || w.MemoryMB < 0 || w.GPUMemoryMB < 0:
			return nil, fmt.Errorf("cannot read the cluster file: worker %q has a negative gpus, slots, count, cores, memoryMb or gpuMemoryMb", w.ID)
		case w.GPUs > 0 && len(w.GPUList) > 0:
			return nil, fmt.Errorf("cannot read the cluster file: worker %q gives both gpus and gpuList; give one", w.ID)
		}
		if w.Count == 0 {
			if err := add(w.ID, w); err != nil {
				return nil, err
			}
			continue
		}
		if w.Count > maxClusterWorkers {
			return nil, fmt.Errorf("cannot read the cluster file: worker %q has count %d, more than %d", w.ID, w.Count, maxClusterWorkers)
		}
		for k := 1; k <= w.Count; k++ {
			if err := add(fmt.Sprintf("%s-%d", w.ID, k), w); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range c.Faults {
		if !seen[f.Worker] {
			return nil, fmt.Errorf("cannot read the cluster file: a fault names worker %q, which the file does not have", f.Worker)
		}
	}
	slices.SortFunc(out, func(a, b node) int { return strings.Compare(a.id, b.id) })
	return out, nil
}

// NamesGPUTypes reports whether some worker of the cluster names its GPUs'
// type. A cluster that names none takes a trace's GPU types as unknown
// (a job asking for a V100 runs on any GPU), not as a request no worker
// meets.
func (c *Cluster) NamesGPUTypes() bool {
	for _, w := range c.Workers {
		if w.GPUType != "" || slices.ContainsFunc(w.GPUList, func(g core.GPU) bool { return g.Name != "" }) {
			return true
		}
	}
	return false
}

// GPUs is the number of GPUs of the cluster.
func (c *Cluster) GPUs() int {
	ns, _ := c.nodes()
	n := 0
	for _, w := range ns {
		n += len(w.gpus)
	}
	return n
}
