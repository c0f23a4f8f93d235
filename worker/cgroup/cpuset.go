package cgroup

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ParseList reads a kernel cpu list ("0-3,8,10-11"; "" is none) into
// ascending, distinct core numbers.
func ParseList(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: %q is not a core number", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: %q is not a range", s, part)
			}
		}
		if b-a > 1<<16 {
			return nil, fmt.Errorf("cpu list %q: range %q too large", s, part)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// FormatList writes cores as a kernel cpu list, ranges folded.
func FormatList(cores []int) string {
	c := slices.Clone(cores)
	slices.Sort(c)
	c = slices.Compact(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}

// cores hands out whole cores exclusively; the rest are shared by the runs
// that asked for none (or for a fraction). Not safe for concurrent use: the
// Manager's lock guards it.
type cores struct {
	all   []int          // the cores runs may use, ascending
	owner map[int]string // exclusive core → the group holding it
}

// take gives group n cores, preferring those in near (the GPUs' affinity)
// and then the lowest free ones; nil when fewer than n are free, or when
// taking them would leave no shared core.
func (c *cores) take(group string, n int, near []int) []int {
	free := make([]int, 0, len(c.all))
	for _, x := range c.all {
		if _, ok := c.owner[x]; !ok {
			free = append(free, x)
		}
	}
	if n <= 0 || n >= len(free) {
		return nil
	}
	picked := make([]int, 0, n)
	for _, x := range free {
		if len(picked) < n && slices.Contains(near, x) {
			picked = append(picked, x)
		}
	}
	for _, x := range free {
		if len(picked) < n && !slices.Contains(picked, x) {
			picked = append(picked, x)
		}
	}
	slices.Sort(picked)
	for _, x := range picked {
		c.owner[x] = group
	}
	return picked
}

// give returns group's cores.
func (c *cores) give(group string) {
	for x, g := range c.owner {
		if g == group {
			delete(c.owner, x)
		}
	}
}

// shared is every core no group holds exclusively.
func (c *cores) shared() []int {
	out := make([]int, 0, len(c.all))
	for _, x := range c.all {
		if _, ok := c.owner[x]; !ok {
			out = append(out, x)
		}
	}
	return out
}
