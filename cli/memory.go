package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// memoryUnits are --memory's units in MiB. MB, GB and TB mean the binary
// units too, as in Slurm's --mem and Docker's --memory: nobody asking for
// "16GB" means 14.9 GiB.
var memoryUnits = map[string]float64{
	"kib": 1.0 / 1024, "kb": 1.0 / 1024, "k": 1.0 / 1024,
	"mib": 1, "mb": 1, "m": 1, "": 1,
	"gib": 1024, "gb": 1024, "g": 1024,
	"tib": 1 << 20, "tb": 1 << 20, "t": 1 << 20,
}

// parseMemory reads --memory ("16GiB", "512MiB", "1.5G", "4096": MiB) as
// MiB, rounded up.
func parseMemory(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' && r != '+' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	per, ok := memoryUnits[unit]
	if !ok {
		return 0, fmt.Errorf("--memory %q: unknown unit %q; use KiB, MiB, GiB or TiB (e.g. 16GiB)", s, t[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("--memory %q: want a positive size such as 16GiB or 512MiB", s)
	}
	mb := math.Ceil(v * per)
	if mb > 1<<62 {
		return 0, fmt.Errorf("--memory %q is too large", s)
	}
	return int64(mb), nil
}
