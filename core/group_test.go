package core

import (
	"encoding/json"
	"strings"
	"testing"
)

// A run's nodes: 1 in the JSON for a run stored without any, kept through
// a round trip; the range; the members' log names.
func TestGroup(t *testing.T) {
	for _, c := range []struct {
		in   Task
		want string
	}{{Task{}, `"nodes":1`}, {Task{Nodes: 1}, `"nodes":1`}, {Task{Nodes: 4}, `"nodes":4`}} {
		b, err := json.Marshal(c.in)
		if err != nil || !strings.Contains(string(b), c.want) {
			t.Fatalf("Marshal(%d) = %s, %v; want %s", c.in.Nodes, b, err, c.want)
		}
		var back Task
		if err := json.Unmarshal(b, &back); err != nil || back.Group() != c.in.Group() || back.IsGroup() != (c.in.Nodes > 1) {
			t.Fatalf("Unmarshal(%s) = nodes %d, %v", b, back.Nodes, err)
		}
	}
	for n, ok := range map[int64]bool{0: false, 1: true, 64: true, 65: false, 1000: false, -1: false} {
		if err := CheckNodes(n); (err == nil) != ok {
			t.Errorf("CheckNodes(%d) = %v", n, err)
		}
	}
	if LogFile("r1", 0) != "r1.log" || LogFile("r1", 2) != "r1.rank2.log" {
		t.Fatalf("LogFile: %s %s", LogFile("r1", 0), LogFile("r1", 2))
	}
}
