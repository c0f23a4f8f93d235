package logpipe

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/rlsched/rlsched/core"
)

// extractor finds metric lines in one run's output as it streams past,
// keeping the partial last line between chunks. A metric line starts with
// its marker: `RLSCHED_METRIC {json}` or `FINAL_REWARD:x` at the very start
// of a line (a marker inside a line is output like any other, so a run
// cannot be made to report what it merely echoes). Not safe for concurrent
// use: one extractor per run, fed in offset order.
type extractor struct {
	partial []byte
	long    bool // inside a line longer than maxLine: skip to its end
	// final is the last FINAL_REWARD value seen; hasFinal says one was.
	final    float64
	hasFinal bool
	// lastEpisodeReward is the last episode_reward metric (the final
	// reward when the run never prints FINAL_REWARD).
	lastEpisodeReward    float64
	hasLastEpisodeReward bool
	// mark is the attempt (≥ 2) whose first metric line adds a
	// core.MetricResume point; 0 once added, or when the extractor did not
	// see the attempt from its start.
	mark int
	// now is the Time (Unix ms) of the points the next lines give: when
	// the master read them, the clock read at the first metric line of a
	// feed (stampNow; output without metrics reads no clock); 0 while
	// rescanning output read before, whose points keep their stored time.
	now int64
}

const maxLine = 1 << 20 // longer lines are not metric lines

// stampNow as extractor.now: stamp the next points with the clock.
const stampNow = -1

var (
	metricPrefix = []byte("RLSCHED_METRIC ")
	finalPrefix  = []byte("FINAL_REWARD:")
)

// resume starts a fresh extractor in the middle of an output stream whose
// preceding bytes end with before: the partial last line of before is kept,
// so a metric line split across the point where this extractor took over is
// still found. whole says before reaches back to the start of the output
// (so all of it is the partial line when it has no newline); otherwise a
// before without a newline leaves the extractor inside a line it skips.
func (x *extractor) resume(before []byte, whole bool) {
	x.partial, x.long = x.partial[:0], false
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		x.partial = append(x.partial, before[i+1:]...)
	} else if whole {
		x.partial = append(x.partial, before...)
	} else {
		x.long = len(before) > 0
	}
}

// feedAppend scans data, the next bytes of the output, and appends the
// metric points of every line it completes to pts. Metric lines are rare in
// training output, so rather than test every line it searches the complete
// lines for the two markers (bytes.Index skips ahead with a vectorised scan
// for their first bytes) and parses only the lines a marker starts, in
// order.
func (x *extractor) feedAppend(pts []core.MetricPoint, data []byte) []core.MetricPoint {
	if x.long || len(x.partial) > 0 {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			if !x.long && len(x.partial)+len(data) <= maxLine {
				x.partial = append(x.partial, data...)
			} else {
				x.partial, x.long = x.partial[:0], true
			}
			return pts
		}
		if !x.long {
			line := append(x.partial, data[:nl]...)
			pts = x.line(bytes.TrimRight(line, "\r"), pts)
		}
		x.partial, x.long = x.partial[:0], false
		data = data[nl+1:]
	}
	// data starts at the start of a line.
	last := bytes.LastIndexByte(data, '\n')
	if rest := data[last+1:]; len(rest) > 0 {
		if len(rest) <= maxLine {
			x.partial = append(x.partial, rest...)
		} else {
			x.long = true
		}
	}
	if last < 0 {
		return pts
	}
	lines := data[:last+1] // complete lines only
	nextF, nextM := -2, -2 // next marker at a line start at or after pos; -1: none left; -2: not searched
	for pos := 0; pos < len(lines); {
		if nextF != -1 && nextF < pos {
			nextF = lineStartIndex(lines, pos, finalPrefix)
		}
		if nextM != -1 && nextM < pos {
			nextM = lineStartIndex(lines, pos, metricPrefix)
		}
		at := nextF
		if at < 0 || (nextM >= 0 && nextM < at) {
			at = nextM
		}
		if at < 0 {
			break
		}
		end := at + bytes.IndexByte(lines[at:], '\n') // lines ends with '\n'
		pts = x.line(bytes.TrimRight(lines[at:end], "\r"), pts)
		pos = end + 1
	}
	return pts
}

// lineStartIndex is the first index at or after from where marker starts a
// line of b (b starts at a line start), or -1.
func lineStartIndex(b []byte, from int, marker []byte) int {
	for from < len(b) {
		i := bytes.Index(b[from:], marker)
		if i < 0 {
			return -1
		}
		if i += from; i == 0 || b[i-1] == '\n' {
			return i
		}
		from = i + 1
	}
	return -1
}

// line parses one complete line (without its newline); only a line that
// starts with a marker counts.
func (x *extractor) line(line []byte, pts []core.MetricPoint) []core.MetricPoint {
	if v, ok := bytes.CutPrefix(line, finalPrefix); ok {
		f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
		if err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			x.final, x.hasFinal = f, true
		}
		return pts
	}
	v, ok := bytes.CutPrefix(line, metricPrefix)
	if !ok {
		return pts
	}
	var m map[string]any
	if json.Unmarshal(v, &m) != nil {
		return pts
	}
	if x.now == stampNow {
		x.now = time.Now().UnixMilli()
	}
	step := int64(0)
	if s, ok := m["step"].(float64); ok {
		step = int64(s)
	}
	n := len(pts)
	for k, v := range m {
		f, ok := v.(float64)
		if !ok || k == "step" || len(k) > 128 || k == core.MetricResume {
			continue
		}
		pts = append(pts, core.MetricPoint{Step: step, Name: k, Value: f, Time: x.now})
		if k == "episode_reward" {
			x.lastEpisodeReward, x.hasLastEpisodeReward = f, true
		}
	}
	if x.mark > 0 && len(pts) > n {
		pts = append(pts, core.MetricPoint{Step: step, Name: core.MetricResume, Value: float64(x.mark), Time: x.now})
		x.mark = 0
	}
	return pts
}

// finalReward returns the run's final reward so far, per API.md: the last
// FINAL_REWARD line, else the last episode_reward metric.
func (x *extractor) finalReward() (float64, bool) {
	if x.hasFinal {
		return x.final, true
	}
	return x.lastEpisodeReward, x.hasLastEpisodeReward
}
