package logpipe

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// refExtract is the extractor's contract stated simply: every complete line,
// in order, through line().
func refExtract(data []byte) ([]core.MetricPoint, *Extractor) {
	var x Extractor
	var pts []core.MetricPoint
	for {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return pts, &x
		}
		pts = x.line(bytes.TrimRight(data[:nl], "\r"), pts)
		data = data[nl+1:]
	}
}

// The marker scan over whole chunks finds what a line-by-line scan finds,
// however the output is cut into chunks.
func TestExtractorChunkingMatchesLineScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lines := []string{
		"plain training output xxxxxxxxxxxxxxxxxxxx",
		`RLSCHED_METRIC {"step": 1, "episode_reward": 2.5, "loss": 0.1}`,
		`[worker 3] RLSCHED_METRIC {"step": 2, "episode_reward": 3.5}`,
		"FINAL_REWARD: 10",
		"prefix FINAL_REWARD: 11.5\r",
		`RLSCHED_METRIC {"step": 4, "x": 1} FINAL_REWARD: 12`,
		"RLSCHED_METRIC not json",
		"RFRFRF RLSCHED_METRI FINAL_REWARD",
		"",
		"R",
		"F",
	}
	for iter := 0; iter < 300; iter++ {
		var out []byte
		for n := rng.IntN(40); n > 0; n-- {
			out = append(out, lines[rng.IntN(len(lines))]...)
			out = append(out, '\n')
		}
		if rng.IntN(2) == 0 {
			out = append(out, "RLSCHED_METRIC {\"step\": 9, \"tail\": 1}"...) // no newline: not complete
		}
		want, wx := refExtract(out)
		var x Extractor
		var got []core.MetricPoint
		for rest := out; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(80))
			got = x.feedAppend(got, rest[:k])
			rest = rest[k:]
		}
		if !samePoints(got, want) {
			t.Fatalf("iteration %d: got %v, want %v for %q", iter, got, want, out)
		}
		gv, gok := x.FinalReward()
		wv, wok := wx.FinalReward()
		if gv != wv || gok != wok {
			t.Fatalf("iteration %d: final %v %v, want %v %v", iter, gv, gok, wv, wok)
		}
	}
}

// samePoints compares point lists in order, ignoring the order of the points
// of one line (they come from a map).
func samePoints(a, b []core.MetricPoint) bool {
	key := func(p []core.MetricPoint) map[int64]map[string]float64 {
		m := map[int64]map[string]float64{}
		for _, x := range p {
			if m[x.Step] == nil {
				m[x.Step] = map[string]float64{}
			}
			m[x.Step][x.Name] = x.Value
		}
		return m
	}
	return len(a) == len(b) && reflect.DeepEqual(key(a), key(b))
}
