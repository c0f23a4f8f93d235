package logpipe

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

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

// The 8-byte fast path escapes exactly what the byte loop escapes, wherever
// the byte that needs escaping falls.
func TestAppendJSONStringFastPath(t *testing.T) {
	slow := func(s []byte) string {
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range string(s) {
			switch {
			case r == '"' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[r>>4])
				b.WriteByte(hexDigits[r&0xF])
			case r == utf8.RuneError:
				b.WriteString(`\ufffd`)
			case r == '\u2028' || r == '\u2029':
				b.WriteString(`\u202`)
				b.WriteByte(hexDigits[r&0xF])
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 19; pos++ {
			in := bytes.Repeat([]byte("abcdefgh"), 3)[:19]
			in[pos] = byte(c)
			if got, want := string(appendJSONString(nil, in)), slow(in); got != want {
				t.Fatalf("byte 0x%02x at %d: got %s, want %s", c, pos, got, want)
			}
		}
	}
}
