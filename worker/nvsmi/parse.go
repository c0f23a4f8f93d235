package nvsmi

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Unknown stands for a value nvidia-smi did not report: "[N/A]",
// "[Not Supported]" or another bracketed word, or a missing GPU.
const Unknown = -1

// GPU is one row of the GPU query.
type GPU struct {
	Index int
	UUID  string
	Name  string
	// MemoryTotalMB and MemoryUsedMB are in MiB, UtilizationPct in percent
	// (0..100); each is Unknown when not reported.
	MemoryTotalMB  int64
	MemoryUsedMB   int64
	UtilizationPct int
}

// App is one row of the compute-apps query: a process holding a GPU context.
type App struct {
	GPUUUID string
	PID     int
	// UsedMemoryMB is in MiB, Unknown when not reported (common on GPUs in
	// WDDM mode or under MIG).
	UsedMemoryMB int64
}

// The fields of the two queries, in the order the parsers expect them.
var (
	gpuFields = []string{"index", "uuid", "name", "memory.total", "memory.used", "utilization.gpu"}
	appFields = []string{"gpu_uuid", "pid", "used_memory"}
)

// GPUArgs and AppArgs are the arguments of the two queries.
var (
	GPUArgs = []string{"--query-gpu=" + strings.Join(gpuFields, ","), "--format=csv,noheader,nounits"}
	AppArgs = []string{"--query-compute-apps=" + strings.Join(appFields, ","), "--format=csv,noheader,nounits"}
)

// maxWarnings bounds the warnings one parse returns, so a screenful of
// garbage becomes a few lines, not thousands.
const maxWarnings = 4

// warnings collects a parse's warnings, worded without the values that
// change between samples (utilisation, memory), so the same fault gives the
// same text every time and is reported once.
type warnings struct {
	list    []string
	dropped int
}

func (w *warnings) add(format string, args ...any) {
	if len(w.list) == maxWarnings {
		w.dropped++
		return
	}
	w.list = append(w.list, fmt.Sprintf(format, args...))
}

func (w *warnings) done() []string {
	if w.dropped > 0 {
		w.list = append(w.list, fmt.Sprintf("%d more rows like these", w.dropped))
	}
	return w.list
}

// lines splits out into trimmed non-empty lines (CRLF or LF).
func lines(out []byte) []string {
	var ls []string
	for raw := range bytes.SplitSeq(out, []byte("\n")) {
		if l := strings.TrimSpace(string(raw)); l != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

// ParseGPUs parses the GPU query's output. A row it cannot use is left out
// with a warning; a value it cannot read is Unknown (bracketed values such
// as "[N/A]" are Unknown without a warning: nvidia-smi's way to say so).
func ParseGPUs(out []byte) ([]GPU, []string) {
	const query = "nvidia-smi --query-gpu"
	var (
		gpus []GPU
		w    warnings
	)
	for n, line := range lines(out) {
		row := n + 1
		f := strings.Split(line, ",")
		if len(f) < len(gpuFields) {
			w.add("%s row %d: %d fields, want %d", query, row, len(f), len(gpuFields))
			continue
		}
		if strings.TrimSpace(f[0]) == "index" {
			continue // a header, from an nvidia-smi that ignores noheader
		}
		// The name is the one field that may hold a comma: the fields before
		// it are counted from the left, those after it from the right.
		tail := f[len(f)-3:]
		idx, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil || idx < 0 {
			w.add("%s row %d: index %s is not a GPU index", query, row, quote(f[0]))
			continue
		}
		g := GPU{
			Index: idx,
			UUID:  strings.TrimSpace(f[1]),
			Name:  strings.TrimSpace(strings.Join(f[2:len(f)-3], ",")),
		}
		if bracketed(g.UUID) {
			w.add("%s: GPU %d has no UUID (%s)", query, idx, g.UUID)
			g.UUID = ""
		}
		if dup := indexOf(gpus, idx); dup >= 0 {
			w.add("%s: GPU %d listed twice; keeping the first", query, idx)
			continue
		}
		g.MemoryTotalMB = number(&w, query, idx, "memory.total", tail[0], "MiB", -1)
		g.MemoryUsedMB = number(&w, query, idx, "memory.used", tail[1], "MiB", -1)
		g.UtilizationPct = int(number(&w, query, idx, "utilization.gpu", tail[2], "%", 100))
		gpus = append(gpus, g)
	}
	return gpus, w.done()
}

// ParseApps parses the compute-apps query's output; no processes is empty
// output (older drivers print "No running processes found").
func ParseApps(out []byte) ([]App, []string) {
	const query = "nvidia-smi --query-compute-apps"
	var (
		apps []App
		w    warnings
	)
	for n, line := range lines(out) {
		row := n + 1
		if strings.HasPrefix(line, "No running processes found") {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != len(appFields) {
			w.add("%s row %d: %d fields, want %d", query, row, len(f), len(appFields))
			continue
		}
		uuid := strings.TrimSpace(f[0])
		if uuid == "gpu_uuid" {
			continue // a header
		}
		pid, err := strconv.Atoi(strings.TrimSpace(f[1]))
		if err != nil || pid <= 0 {
			// [N/A] included: without a pid the process cannot be told
			// apart, so it is left out rather than guessed foreign.
			w.add("%s row %d: pid %s is not a process id", query, row, quote(f[1]))
			continue
		}
		if uuid == "" || bracketed(uuid) {
			w.add("%s row %d: process %d has no GPU UUID", query, row, pid)
			continue
		}
		apps = append(apps, App{GPUUUID: uuid, PID: pid,
			UsedMemoryMB: number(&w, query, -1, "used_memory", f[2], "MiB", -1)})
	}
	return apps, w.done()
}

// number reads a non-negative integer field, with or without its unit, at
// most limit when limit ≥ 0. A bracketed value is Unknown quietly; anything
// else unreadable is Unknown with a warning.
func number(w *warnings, query string, gpu int, field, s, unit string, limit int64) int64 {
	s = strings.TrimSpace(s)
	if bracketed(s) || s == "N/A" || s == "" {
		return Unknown
	}
	v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(s, unit)), 10, 64)
	if err != nil || v < 0 || (limit >= 0 && v > limit) {
		if gpu >= 0 {
			w.add("%s: GPU %d %s %s is not a number we can use", query, gpu, field, quote(s))
		} else {
			w.add("%s: %s %s is not a number we can use", query, field, quote(s))
		}
		return Unknown
	}
	return v
}

func bracketed(s string) bool {
	return len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']'
}

func indexOf(gpus []GPU, idx int) int {
	for i, g := range gpus {
		if g.Index == idx {
			return i
		}
	}
	return -1
}

// quote quotes at most 32 bytes of s for a warning.
func quote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 32 {
		s = s[:32] + "…"
	}
	return strconv.Quote(s)
}
