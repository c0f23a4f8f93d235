package nvsmi

import (
	"maps"
	"testing"
)

func TestParseTopo(t *testing.T) {
	f := func(out string, want map[int]string) {
		t.Helper()
		if got := ParseTopo([]byte(out)); !maps.Equal(got, want) {
			t.Fatalf("ParseTopo = %v, want %v", got, want)
		}
	}
	f("\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"+
		"GPU0\t X \tNV12\tSYS\t0-15,32-47\t0\t\tN/A\n"+
		"GPU1\tNV12\t X \tSYS\t16-31,48-63\t1\t\tN/A\n"+
		"NIC0\tSYS\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n",
		map[int]string{0: "0-15,32-47", 1: "16-31,48-63"})
	f("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tN/A\tN/A\n", map[int]string{})
	f("garbage\n", map[int]string{})
	f("", map[int]string{})
}
