package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// heatBins is how many ranges a numeric param with more distinct values is
// cut into: a tpe or random sweep's draws are all distinct, and a column
// per draw would be a diagonal of single cells.
const heatBins = 6

// heatAxis is one side of a heatmap: its labels in order and where a
// group's value of the param falls (-1: the group lacks it).
type heatAxis struct {
	labels []string
	index  func(v json.RawMessage, ok bool) int
}

// axisFor lays out param key's values over groups: each distinct value
// when there are at most heatBins of them (a grid's), else heatBins
// equal-width ranges, on a log scale when every value is positive and they
// span two decades (the dashboard's parallel-coordinates axis rule).
func axisFor(sw sweepView, key string) heatAxis {
	var nums []float64
	texts := map[string]bool{}
	numeric := true
	for _, g := range sw.Groups {
		v, ok := g.Params[key]
		if !ok {
			continue
		}
		texts[paramText(v, true)] = true
		var f float64
		if json.Unmarshal(v, &f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			numeric = false
		}
		nums = append(nums, f)
	}
	if !numeric || len(texts) <= heatBins {
		labels := make([]string, 0, len(texts))
		for s := range texts {
			labels = append(labels, s)
		}
		if numeric {
			slices.SortFunc(labels, func(a, b string) int {
				x, _ := strconv.ParseFloat(a, 64)
				y, _ := strconv.ParseFloat(b, 64)
				return cmpFloat(x, y)
			})
		} else {
			slices.Sort(labels)
		}
		return heatAxis{labels: labels, index: func(v json.RawMessage, ok bool) int {
			if !ok {
				return -1
			}
			return slices.Index(labels, paramText(v, true))
		}}
	}
	lo, hi := slices.Min(nums), slices.Max(nums)
	logScale := lo > 0 && hi/lo >= 100
	scale := func(f float64) float64 { return f }
	if logScale {
		scale = math.Log10
	}
	a, b := scale(lo), scale(hi)
	labels := make([]string, heatBins)
	for i := range labels {
		from, to := a+(b-a)*float64(i)/heatBins, a+(b-a)*float64(i+1)/heatBins
		if logScale {
			from, to = math.Pow(10, from), math.Pow(10, to)
		}
		labels[i] = strconv.FormatFloat(from, 'g', 3, 64) + ".." + strconv.FormatFloat(to, 'g', 3, 64)
	}
	return heatAxis{labels: labels, index: func(v json.RawMessage, ok bool) int {
		var f float64
		if !ok || json.Unmarshal(v, &f) != nil {
			return -1
		}
		return min(int((scale(f)-a)/(b-a)*heatBins), heatBins-1)
	}}
}

func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// heatmapLines is the mean final reward of sw's groups at each pair of
// xKey and yKey values or ranges, the dashboard's heatmap as text: a row
// per y (the largest on top), a column per x, the number of groups
// averaged beside each mean, "·" where no group is.
func heatmapLines(sw sweepView, xKey, yKey string) []byte {
	xs, ys := axisFor(sw, xKey), axisFor(sw, yKey)
	type cell struct {
		sum float64
		n   int
	}
	cells := make([][]cell, len(ys.labels))
	for j := range cells {
		cells[j] = make([]cell, len(xs.labels))
	}
	for _, g := range sw.Groups {
		xv, xok := g.Params[xKey]
		yv, yok := g.Params[yKey]
		i, j := xs.index(xv, xok), ys.index(yv, yok)
		if i < 0 || j < 0 || g.FinalReward == nil || g.FinalReward.Mean == nil {
			continue
		}
		cells[j][i].sum += *g.FinalReward.Mean
		cells[j][i].n++
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nmean final reward over %s (columns) and %s (rows), groups averaged in brackets:\n", xKey, yKey)
	t := newTable(append([]string{strings.ToUpper(yKey) + ` \ ` + strings.ToUpper(xKey)}, xs.labels...)...)
	for j := len(ys.labels) - 1; j >= 0; j-- {
		row := []string{fitWidth(ys.labels[j], 30)}
		for _, c := range cells[j] {
			if c.n == 0 {
				row = append(row, "·")
				continue
			}
			m := c.sum / float64(c.n)
			row = append(row, fmt.Sprintf("%s (%d)", formatFloat(&m, true), c.n))
		}
		t.row(row...)
	}
	b.Write(t.bytes())
	return b.Bytes()
}
