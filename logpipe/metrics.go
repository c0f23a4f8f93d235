package logpipe

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/rlsched/rlsched/core"
)

// Extractor finds metric lines in one run's output as it streams past,
// keeping the partial last line between chunks. Not safe for concurrent use:
// one extractor per run, fed in offset order.
type Extractor struct {
	partial []byte
	// Final is the last FINAL_REWARD value seen; HasFinal says one was.
	Final    float64
	HasFinal bool
	// LastEpisodeReward is the last episode_reward metric (used as the final
	// reward when the run never prints FINAL_REWARD).
	LastEpisodeReward    float64
	HasLastEpisodeReward bool
}

const maxLine = 1 << 20 // longer lines are not metric lines; drop the partial

var (
	metricPrefix = []byte("RLSCHED_METRIC ")
	finalPrefix  = []byte("FINAL_REWARD:")
)

// Feed scans data and returns the metric points of every complete line.
func (x *Extractor) Feed(data []byte) []core.MetricPoint {
	return x.feedAppend(nil, data)
}

// resume starts a fresh extractor in the middle of an output stream whose
// preceding bytes end with before: the partial last line of before is kept,
// so a metric line split across the point where this extractor took over is
// still found. whole says before reaches back to the start of the output
// (so all of it is the partial line when it has no newline).
func (x *Extractor) resume(before []byte, whole bool) {
	x.partial = x.partial[:0]
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		x.partial = append(x.partial, before[i+1:]...)
	} else if whole {
		x.partial = append(x.partial, before...)
	}
}

// feedAppend is Feed appending to pts. Metric lines are rare in training
// output, so rather than test every line it searches the complete lines for
// the two markers (bytes.Index skips ahead with a vectorised scan for their
// first bytes) and parses only the lines holding one, in order.
func (x *Extractor) feedAppend(pts []core.MetricPoint, data []byte) []core.MetricPoint {
	if len(x.partial) > 0 {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			if len(x.partial)+len(data) <= maxLine {
				x.partial = append(x.partial, data...)
			} else {
				x.partial = x.partial[:0]
			}
			return pts
		}
		line := append(x.partial, data[:nl]...)
		x.partial = x.partial[:0]
		pts = x.line(bytes.TrimRight(line, "\r"), pts)
		data = data[nl+1:]
	}
	last := bytes.LastIndexByte(data, '\n')
	if rest := data[last+1:]; len(rest) > 0 {
		if len(rest) <= maxLine {
			x.partial = append(x.partial, rest...)
		}
	}
	if last < 0 {
		return pts
	}
	lines := data[:last+1] // complete lines only
	nextF, nextM := -2, -2 // next marker at or after pos; -1: none left; -2: not searched
	for pos := 0; pos < len(lines); {
		if nextF != -1 && nextF < pos {
			if nextF = bytes.Index(lines[pos:], finalPrefix); nextF >= 0 {
				nextF += pos
			}
		}
		if nextM != -1 && nextM < pos {
			if nextM = bytes.Index(lines[pos:], metricPrefix); nextM >= 0 {
				nextM += pos
			}
		}
		at := nextF
		if at < 0 || (nextM >= 0 && nextM < at) {
			at = nextM
		}
		if at < 0 {
			break
		}
		start := bytes.LastIndexByte(lines[pos:at], '\n') + 1 + pos
		end := at + bytes.IndexByte(lines[at:], '\n') // lines ends with '\n'
		pts = x.line(bytes.TrimRight(lines[start:end], "\r"), pts)
		pos = end + 1
	}
	return pts
}

func (x *Extractor) line(line []byte, pts []core.MetricPoint) []core.MetricPoint {
	if i := bytes.Index(line, finalPrefix); i >= 0 {
		v, err := strconv.ParseFloat(string(bytes.TrimSpace(line[i+len(finalPrefix):])), 64)
		if err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
			x.Final, x.HasFinal = v, true
		}
		return pts
	}
	i := bytes.Index(line, metricPrefix)
	if i < 0 {
		return pts
	}
	var m map[string]any
	if json.Unmarshal(line[i+len(metricPrefix):], &m) != nil {
		return pts
	}
	step := int64(0)
	if s, ok := m["step"].(float64); ok {
		step = int64(s)
	}
	for k, v := range m {
		f, ok := v.(float64)
		if !ok || k == "step" || len(k) > 128 {
			continue
		}
		pts = append(pts, core.MetricPoint{Step: step, Name: k, Value: f})
		if k == "episode_reward" {
			x.LastEpisodeReward, x.HasLastEpisodeReward = f, true
		}
	}
	return pts
}

// FinalReward returns the run's final reward so far, per API.md: the last
// FINAL_REWARD line, else the last episode_reward metric.
func (x *Extractor) FinalReward() (float64, bool) {
	if x.HasFinal {
		return x.Final, true
	}
	return x.LastEpisodeReward, x.HasLastEpisodeReward
}
