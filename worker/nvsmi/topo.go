package nvsmi

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// TopoArgs asks for the GPU topology matrix, whose "CPU Affinity" column
// names the cores near each GPU.
var TopoArgs = []string{"topo", "-m"}

// ParseTopo reads `nvidia-smi topo -m`: the CPU affinity of each GPU by
// index, as a kernel cpu list ("0-15,32-47"). A GPU whose affinity is N/A,
// or a table it cannot read, is left out: the cores near it are unknown.
func ParseTopo(out []byte) map[int]string {
	aff := map[int]string{}
	col := -1 // tokens before "CPU Affinity" in a row, label excluded
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(stripANSI(sc.Text()))
		if len(f) == 0 {
			continue
		}
		if col < 0 {
			for i := 0; i+1 < len(f); i++ {
				if f[i] == "CPU" && f[i+1] == "Affinity" {
					col = i
					break
				}
			}
			continue
		}
		idx, ok := strings.CutPrefix(f[0], "GPU")
		n, err := strconv.Atoi(idx)
		if !ok || err != nil || len(f) <= col+1 {
			if f[0] == "Legend:" {
				break
			}
			continue
		}
		if v := f[col+1]; v != "N/A" && validList(v) {
			aff[n] = v
		}
	}
	return aff
}

// validList: s is a kernel cpu list, digits, commas and dashes only.
func validList(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && c != ',' && c != '-' {
			return false
		}
	}
	return s != ""
}

// stripANSI drops the colour escapes some versions print in the matrix.
func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b[") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
