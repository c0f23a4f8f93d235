package sqlutil

import (
	"encoding/json"
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// placement is a run's placement_json column (issue 28): what it asks of
// its GPU's memory and type and of its worker's labels, and how many
// workers it spans (issue 29: a group's nodes; absent: 1), and the
// container image it runs in (issue 27: only a worker with a runtime gets
// it), fixed at creation.
// Its fraction of a GPU is a column of its own (gpu_fraction), which the
// usage query sums.
type placement struct {
	GPUMemoryMB int64             `json:"gpuMemoryMb,omitempty"`
	GPUType     []string          `json:"gpuType,omitempty"`
	Constraints map[string]string `json:"constraints,omitempty"`
	Nodes       int               `json:"nodes,omitempty"`
	Image       string            `json:"image,omitempty"`
}

// encodePlacement is t's placement_json: nil when it asks for none of it.
func encodePlacement(t *core.Task) (*string, error) {
	if f := t.GPUFraction; f < 0 || f >= 1 || CheckFinite("gpu fraction", f) != nil || t.GPUMemoryMB < 0 {
		return nil, fmt.Errorf("cannot store run %s: gpu fraction %v and gpuMemoryMb %d out of range", t.ID, f, t.GPUMemoryMB)
	}
	if t.Nodes < 0 || t.Nodes > core.MaxNodes {
		return nil, fmt.Errorf("cannot store run %s: nodes %d out of range", t.ID, t.Nodes)
	}
	nodes := 0 // a run on one worker stores none
	if t.IsGroup() {
		nodes = t.Nodes
	}
	if t.GPUMemoryMB == 0 && len(t.GPUType) == 0 && len(t.Constraints) == 0 && nodes == 0 && t.Image == "" {
		return nil, nil
	}
	b, err := json.Marshal(placement{t.GPUMemoryMB, t.GPUType, t.Constraints, nodes, t.Image})
	if err != nil {
		return nil, fmt.Errorf("cannot store run %s: %w", t.ID, err)
	}
	s := string(b)
	return &s, nil
}

// decodePlacement sets t's placement fields from its column.
func decodePlacement(t *core.Task, col *string) error {
	if col == nil || *col == "" {
		return nil
	}
	var p placement
	if err := json.Unmarshal([]byte(*col), &p); err != nil {
		return fmt.Errorf("run %s: cannot decode its placement: %w", t.ID, err)
	}
	t.GPUMemoryMB, t.GPUType, t.Constraints, t.Nodes, t.Image = p.GPUMemoryMB, p.GPUType, p.Constraints, p.Nodes, p.Image
	return nil
}
