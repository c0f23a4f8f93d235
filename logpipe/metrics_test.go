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
func refExtract(data []byte) ([]core.MetricPoint, *extractor) {
	var x extractor
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
		var x extractor
		var got []core.MetricPoint
		for rest := out; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(80))
			got = x.feedAppend(got, rest[:k])
			rest = rest[k:]
		}
		if !samePoints(got, want) {
			t.Fatalf("iteration %d: got %v, want %v for %q", iter, got, want, out)
		}
		gv, gok := x.finalReward()
		wv, wok := wx.finalReward()
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

func TestExtractor(t *testing.T) {
	var x extractor
	pts := x.feedAppend(nil, []byte("hello\nRLSCHED_METRIC {\"step\": 3, \"episode_reward\": 1"))
	if len(pts) != 0 {
		t.Fatalf("partial line gave %v", pts)
	}
	pts = x.feedAppend(nil, []byte("2.5, \"loss\": 0.5}\nRLSCHED_METRIC {bad json}\nFINAL_REWARD: 99.5\n"))
	if len(pts) != 2 {
		t.Fatalf("got %v", pts)
	}
	if v, ok := x.finalReward(); !ok || v != 99.5 {
		t.Fatalf("final %v %v", v, ok)
	}
	var y extractor
	y.feedAppend(nil, []byte("RLSCHED_METRIC {\"step\":1,\"episode_reward\":7}\n"))
	if v, ok := y.finalReward(); !ok || v != 7 {
		t.Fatalf("fallback final %v %v", v, ok)
	}
}

// Markers count only at the very start of a line (issue 12): a run that
// echoes a marker inside a line, or after a carriage return, reports
// nothing, however the output is cut into chunks.
func TestExtractorMarkersOnlyAtLineStart(t *testing.T) {
	f := func(out string, wantPts int, wantFinal float64, wantHas bool) {
		t.Helper()
		for chunk := 1; chunk <= len(out); chunk++ {
			var x extractor
			var pts []core.MetricPoint
			for rest := []byte(out); len(rest) > 0; {
				k := min(len(rest), chunk)
				pts = x.feedAppend(pts, rest[:k])
				rest = rest[k:]
			}
			if v, ok := x.finalReward(); len(pts) != wantPts || v != wantFinal || ok != wantHas {
				t.Fatalf("%q in chunks of %d: %d points, final %v %v; want %d points, final %v %v",
					out, chunk, len(pts), v, ok, wantPts, wantFinal, wantHas)
			}
		}
	}
	f("echo FINAL_REWARD: 5\n", 0, 0, false)
	f("x RLSCHED_METRIC {\"step\": 1, \"episode_reward\": 3}\n", 0, 0, false)
	f("progress 50%\rFINAL_REWARD: 7\n", 0, 0, false)
	f(" FINAL_REWARD: 7\n", 0, 0, false)
	f("FINAL_REWARD: 7\nsay FINAL_REWARD: 9\n", 0, 7, true)
	f("RLSCHED_METRIC {\"step\": 1, \"episode_reward\": 3}\nlog RLSCHED_METRIC {\"step\": 2, \"episode_reward\": 4}\n", 1, 3, true)
	f("aFINAL_REWARD: 1\nFINAL_REWARD: 2\r\n", 0, 2, true)
}

// A line longer than maxLine is skipped to its end: a marker that falls
// at a chunk boundary inside it is not at a line start.
func TestExtractorLongLineSkippedToItsEnd(t *testing.T) {
	var x extractor
	long := bytes.Repeat([]byte("x"), maxLine+10)
	x.feedAppend(nil, long)
	x.feedAppend(nil, []byte("FINAL_REWARD: 3\n"))
	if _, ok := x.finalReward(); ok {
		t.Fatal("a marker inside an overlong line counted")
	}
	x.feedAppend(nil, []byte("FINAL_REWARD: 4\n"))
	if v, ok := x.finalReward(); !ok || v != 4 {
		t.Fatalf("final %v %v after the long line ended, want 4", v, ok)
	}
}
