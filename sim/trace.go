package sim

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The trace readers (docs/sim.md, "Trace formats"). Each streams its file
// (a trace of gigabytes is read row by row), takes every job it can and
// skips every other with its reason; only a file that is not of the format
// at all (not JSON, no header) is an error.

// Formats lists the trace formats ReadTrace takes.
var Formats = []string{"philly", "helios", "alibaba", "alibaba2023", "synthetic", "history"}

// clockLayout is the wall-clock time of the Philly and Helios traces, in
// their cluster's local time, read as UTC (only differences matter).
const clockLayout = "2006-01-02 15:04:05"

func parseClock(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "None" {
		return time.Time{}, errors.New("no time")
	}
	return time.Parse(clockLayout, s)
}

// ReadPhilly reads Philly's cluster_job_log (msr-fiddle/philly-traces): a
// JSON array of jobs with jobid, user, vc, submitted_time and attempts,
// each with start_time, end_time and detail (the machines and their
// GPUs). A job's GPUs are those of its first attempt; its duration is the
// sum of its attempts' (the time it ran, retries included).
func ReadPhilly(r io.Reader) (*Trace, error) {
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, fmt.Errorf("cannot read the Philly trace: it is not a JSON array of jobs (cluster_job_log)")
	}
	tr := &Trace{}
	ignored := map[string]bool{}
	for i := 1; dec.More(); i++ {
		var b json.RawMessage
		if err := dec.Decode(&b); err != nil {
			return nil, fmt.Errorf("cannot read the Philly trace at job %d: %w", i, err)
		}
		var pj struct {
			JobID     string `json:"jobid"`
			User      string `json:"user"`
			Submitted string `json:"submitted_time"`
			Attempts  []struct {
				Start  string `json:"start_time"`
				End    string `json:"end_time"`
				Detail []struct {
					GPUs []string `json:"gpus"`
				} `json:"detail"`
			} `json:"attempts"`
		}
		var raw map[string]json.RawMessage
		if json.Unmarshal(b, &raw) == nil {
			for k := range raw {
				switch k {
				case "jobid", "user", "submitted_time", "attempts":
				default:
					ignored[k] = true
				}
			}
		}
		if err := json.Unmarshal(b, &pj); err != nil {
			tr.skip(fmt.Sprintf("job %d", i), "cannot read it: "+err.Error())
			continue
		}
		id := pj.JobID
		if id == "" {
			id = fmt.Sprintf("job %d", i)
		}
		sub, err := parseClock(pj.Submitted)
		if err != nil {
			tr.skip(id, fmt.Sprintf("its submitted_time %q is not a time", pj.Submitted))
			continue
		}
		if len(pj.Attempts) == 0 {
			tr.skip(id, "it has no attempts (it never ran)")
			continue
		}
		gpus := 0
		for _, d := range pj.Attempts[0].Detail {
			gpus += len(d.GPUs)
		}
		var dur time.Duration
		bad := ""
		for _, a := range pj.Attempts {
			s, err1 := parseClock(a.Start)
			e, err2 := parseClock(a.End)
			if err1 != nil || err2 != nil {
				bad = fmt.Sprintf("an attempt's start_time %q or end_time %q is not a time", a.Start, a.End)
				break
			}
			dur += e.Sub(s)
		}
		if bad != "" {
			tr.skip(id, bad)
			continue
		}
		tr.add(Job{ID: id, User: pj.User, Submit: sub, Duration: dur, GPUs: gpus})
	}
	tr.Ignored = sortedKeys(ignored)
	tr.sortJobs()
	return tr, nil
}

// csvRows reads a CSV file with a header row, calling row for each record
// with a lookup by column name. want names the columns the reader uses;
// the others are reported as ignored. A record of the wrong width is
// skipped with its line.
func csvRows(r io.Reader, what string, header []string, want []string, tr *Trace, row func(line int, col func(string) string)) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	if header == nil {
		h, err := cr.Read()
		if err != nil {
			return fmt.Errorf("cannot read the %s trace: no header row: %w", what, err)
		}
		header = slices.Clone(h)
	}
	idx := map[string]int{}
	for i, h := range header {
		idx[strings.TrimSpace(strings.ToLower(h))] = i
	}
	for _, w := range want {
		if _, ok := idx[w]; !ok {
			return fmt.Errorf("cannot read the %s trace: it has no column %q (its columns: %s)", what, w, strings.Join(header, ", "))
		}
	}
	for _, h := range header {
		if !slices.Contains(want, strings.TrimSpace(strings.ToLower(h))) {
			tr.Ignored = append(tr.Ignored, h)
		}
	}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) && pe.Err != csv.ErrFieldCount {
			tr.skip(fmt.Sprintf("line %d", line), "cannot read it: "+err.Error())
			continue
		}
		if err != nil && !errors.As(err, &pe) {
			return fmt.Errorf("cannot read the %s trace at line %d: %w", what, line, err)
		}
		if len(rec) != len(header) {
			tr.skip(fmt.Sprintf("line %d", line), fmt.Sprintf("it has %d fields, the header %d", len(rec), len(header)))
			continue
		}
		// A copy: the record's fields share one string of the whole line,
		// which a kept id would hold (a row's unused columns can be large).
		row(line, func(name string) string { return strings.Clone(strings.TrimSpace(rec[idx[name]])) })
	}
}

// ReadHelios reads a Helios cluster log (Venus, Earth, Saturn, Uranus:
// S-Lab's HeliosData, Slurm's accounting): a CSV with a header naming
// job_id, user, gpu_num, submit_time, start_time and end_time (and
// usually vc, cpu_num, node_num, state, duration). A job's duration is
// end − start.
func ReadHelios(r io.Reader) (*Trace, error) {
	tr := &Trace{}
	err := csvRows(r, "Helios", nil, []string{"job_id", "user", "gpu_num", "submit_time", "start_time", "end_time"}, tr,
		func(line int, col func(string) string) {
			id := col("job_id")
			if id == "" {
				id = fmt.Sprintf("line %d", line)
			}
			gpus, err := strconv.Atoi(col("gpu_num"))
			if err != nil {
				tr.skip(id, fmt.Sprintf("its gpu_num %q is not a number", col("gpu_num")))
				return
			}
			sub, err1 := parseClock(col("submit_time"))
			start, err2 := parseClock(col("start_time"))
			end, err3 := parseClock(col("end_time"))
			if err1 != nil || err2 != nil || err3 != nil {
				tr.skip(id, fmt.Sprintf("its submit_time %q, start_time %q or end_time %q is not a time",
					col("submit_time"), col("start_time"), col("end_time")))
				return
			}
			tr.add(Job{ID: id, User: col("user"), Submit: sub, Duration: end.Sub(start), GPUs: gpus})
		})
	if err != nil {
		return nil, err
	}
	tr.sortJobs()
	return tr, nil
}

// The columns of Alibaba's cluster-trace-gpu-v2020 tables, which ship
// without a header row (their names are in the repository's README).
var (
	alibabaJobColumns  = []string{"job_name", "inst_id", "user", "status", "start_time", "end_time"}
	alibabaTaskColumns = []string{"job_name", "task_name", "inst_num", "status", "start_time", "end_time", "plan_cpu", "plan_mem", "plan_gpu", "gpu_type"}
)

// ReadAlibaba reads Alibaba's GPU trace of 2020 (alibaba/clusterdata,
// cluster-trace-gpu-v2020): pai_job_table (a job's submission is its
// start_time) and pai_task_table (its tasks: inst_num instances of
// plan_gpu percent of a GPU each). A job's GPUs are its instances'
// plan_gpu, each rounded up to whole GPUs (rlsched has no GPU fractions
// yet); its duration runs from its first task's start to its last task's
// end. Either table may have a header row or not.
func ReadAlibaba(jobs, tasks io.Reader) (*Trace, error) {
	tr := &Trace{}
	type agg struct {
		gpus       int
		start, end float64
	}
	byJob := map[string]*agg{}
	err := csvRows(headerless(tasks, alibabaTaskColumns), "Alibaba task", nil,
		[]string{"job_name", "inst_num", "start_time", "end_time", "plan_gpu"}, tr,
		func(line int, col func(string) string) {
			name := col("job_name")
			inst, err1 := strconv.ParseFloat(col("inst_num"), 64)
			start, err2 := strconv.ParseFloat(col("start_time"), 64)
			end, err3 := strconv.ParseFloat(col("end_time"), 64)
			if err1 != nil || err2 != nil || err3 != nil {
				tr.skip(name, fmt.Sprintf("task table line %d: its inst_num, start_time or end_time is not a number", line))
				return
			}
			pg := 0.0
			if s := col("plan_gpu"); s != "" {
				if pg, err1 = strconv.ParseFloat(s, 64); err1 != nil || pg < 0 {
					tr.skip(name, fmt.Sprintf("task table line %d: its plan_gpu %q is not a number", line, s))
					return
				}
			}
			a := byJob[name]
			if a == nil {
				a = &agg{start: start, end: end}
				byJob[name] = a
			}
			a.gpus += int(inst) * int(math.Ceil(pg/100))
			a.start, a.end = min(a.start, start), max(a.end, end)
		})
	if err != nil {
		return nil, err
	}
	ignored := tr.Ignored
	tr.Ignored = nil
	err = csvRows(headerless(jobs, alibabaJobColumns), "Alibaba job", nil,
		[]string{"job_name", "user", "start_time"}, tr,
		func(line int, col func(string) string) {
			name := col("job_name")
			sub, err := strconv.ParseFloat(col("start_time"), 64)
			if err != nil {
				tr.skip(name, fmt.Sprintf("its start_time %q is not a number", col("start_time")))
				return
			}
			a := byJob[name]
			if a == nil {
				tr.skip(name, "the task table has no task of it")
				return
			}
			tr.add(Job{ID: name, User: col("user"), Submit: time.Unix(0, int64(sub*1e9)).UTC(),
				Duration: time.Duration((a.end - a.start) * 1e9), GPUs: a.gpus})
		})
	if err != nil {
		return nil, err
	}
	tr.Ignored = append(tr.Ignored, ignored...)
	tr.sortJobs()
	return tr, nil
}

// headerless gives r a header row of columns when its first line is not
// one (its first field is not columns[0]).
func headerless(r io.Reader, columns []string) io.Reader {
	buf := make([]byte, len(columns[0]))
	n, _ := io.ReadFull(r, buf)
	rest := io.MultiReader(strings.NewReader(string(buf[:n])), r)
	if string(buf[:n]) == columns[0] {
		return rest
	}
	return io.MultiReader(strings.NewReader(strings.Join(columns, ",")+"\n"), rest)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ReadOpenB reads Alibaba's GPU trace of 2023 (alibaba/clusterdata,
// cluster-trace-gpu-v2023: openb_pod_list*.csv): one pod per row, with a
// header naming name, num_gpu, gpu_milli, creation_time, scheduled_time
// and deletion_time (seconds), and cpu_milli, memory_mib, gpu_milli and
// gpu_spec. A pod's GPUs are num_gpu, or its share of one (gpu_milli <
// 1000, in hundredths, at least one: Trace.WholeGPUs rounds them up);
// its cores, memory and GPU types (gpu_spec) are its requests. It is
// submitted at creation_time and runs from scheduled_time to
// deletion_time. The pods carry no user: each qos class stands for one.
func ReadOpenB(r io.Reader) (*Trace, error) {
	tr := &Trace{}
	err := readOpenB(r, true, tr, func(p Pod) {
		user := "qos-" + p.QoS
		if p.QoS == "" {
			user = "pods"
		}
		j := Job{ID: p.Name, User: user, Submit: p.Created, Duration: p.Duration(), GPUs: p.NumGPU,
			CPUMillis: p.CPUMilli, MemoryMB: p.MemoryMiB, GPUType: p.GPUSpec}
		if p.Shares() {
			j.GPUs, j.GPUFraction = 0, max(math.Round(float64(p.GPUMilli)/10), 1)/100
		}
		if j.GPUs == 0 && j.GPUFraction == 0 {
			j.GPUType = nil // a CPU pod's gpu_spec names nothing it uses
		}
		tr.add(j)
	})
	if err != nil {
		return nil, err
	}
	tr.sortJobs()
	return tr, nil
}

// Pod is one row of the openb pod list as the trace has it, for a replay
// that keeps what the simulator rounds away (bench's replay scenario):
// cores and memory, a share of a GPU, the GPU types it may run on.
type Pod struct {
	Name      string
	CPUMilli  int64 // cpu_milli: thousandths of a core
	MemoryMiB int64 // memory_mib
	NumGPU    int   // num_gpu: 0..8
	// GPUMilli is gpu_milli, the thousandths of each GPU: below 1000 (with
	// NumGPU 1) the pod shares its GPU.
	GPUMilli int
	// GPUSpec is gpu_spec split at "|": the GPU models it may run on
	// ("V100M16|V100M32"); empty: any.
	GPUSpec []string
	QoS     string
	// Created, Scheduled and Deleted are creation_time, scheduled_time and
	// deletion_time (seconds of the trace, as times after the Unix epoch).
	Created, Scheduled, Deleted time.Time
}

// Duration is how long the pod ran: deletion − scheduling.
func (p Pod) Duration() time.Duration { return p.Deleted.Sub(p.Scheduled) }

// GPUs is what the pod asked for in GPUs: its share of one (0.46) or its
// whole GPUs.
func (p Pod) GPUs() float64 {
	if p.Shares() {
		return float64(p.GPUMilli) / 1000
	}
	return float64(p.NumGPU)
}

// Shares reports whether the pod asked for a share of one GPU.
func (p Pod) Shares() bool { return p.NumGPU == 1 && p.GPUMilli > 0 && p.GPUMilli < 1000 }

// Pods is what ReadOpenBPods made of a pod list: the pods in the order of
// their creation, and the rows it could not take with their reasons.
type Pods struct {
	Pods    []Pod
	Skipped []Skipped
	Ignored []string
}

// ReadOpenBPods reads an openb pod list as ReadOpenB does, keeping every
// column of each pod (it needs cpu_milli, memory_mib, gpu_milli and
// gpu_spec too). Pods never scheduled or never ended are skipped, as are
// rows with a number that is not one.
func ReadOpenBPods(r io.Reader) (*Pods, error) {
	tr := &Trace{}
	out := &Pods{}
	if err := readOpenB(r, true, tr, func(p Pod) {
		switch {
		case p.Duration() < 0:
			tr.skip(p.Name, fmt.Sprintf("its duration is negative (%v)", p.Duration()))
		case p.NumGPU < 0 || p.GPUMilli < 0 || p.GPUMilli > 1000:
			tr.skip(p.Name, fmt.Sprintf("it asks for %d GPUs of %d milli-GPUs each", p.NumGPU, p.GPUMilli))
		default:
			out.Pods = append(out.Pods, p)
		}
	}); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out.Pods, func(a, b Pod) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	out.Skipped, out.Ignored = tr.Skipped, tr.Ignored
	return out, nil
}

// readOpenB reads the rows of an openb pod list into each, skipping into
// tr those it cannot read. full: the resource columns are required and read.
func readOpenB(r io.Reader, full bool, tr *Trace, each func(Pod)) error {
	secs := func(s string) (time.Time, error) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return time.Time{}, err
		}
		return time.Unix(0, int64(v*1e9)).UTC(), nil
	}
	want := []string{"name", "num_gpu", "qos", "creation_time", "scheduled_time", "deletion_time"}
	if full {
		want = append(want, "cpu_milli", "memory_mib", "gpu_milli", "gpu_spec")
	}
	return csvRows(r, "Alibaba 2023", nil, want, tr,
		func(line int, col func(string) string) {
			p := Pod{Name: col("name"), QoS: col("qos")}
			if p.Name == "" {
				p.Name = fmt.Sprintf("line %d", line)
			}
			var err error
			if p.NumGPU, err = strconv.Atoi(col("num_gpu")); err != nil {
				tr.skip(p.Name, fmt.Sprintf("its num_gpu %q is not a number", col("num_gpu")))
				return
			}
			if p.Created, err = secs(col("creation_time")); err != nil {
				tr.skip(p.Name, fmt.Sprintf("its creation_time %q is not a number", col("creation_time")))
				return
			}
			if col("scheduled_time") == "" || col("deletion_time") == "" {
				tr.skip(p.Name, "it was never scheduled, or never ended (no scheduled_time or deletion_time)")
				return
			}
			var err2 error
			p.Scheduled, err = secs(col("scheduled_time"))
			p.Deleted, err2 = secs(col("deletion_time"))
			if err != nil || err2 != nil {
				tr.skip(p.Name, fmt.Sprintf("its scheduled_time %q or deletion_time %q is not a number", col("scheduled_time"), col("deletion_time")))
				return
			}
			if full {
				for _, f := range []struct {
					name string
					v    *int64
				}{{"cpu_milli", &p.CPUMilli}, {"memory_mib", &p.MemoryMiB}} {
					if *f.v, err = strconv.ParseInt(col(f.name), 10, 64); err != nil {
						tr.skip(p.Name, fmt.Sprintf("its %s %q is not a number", f.name, col(f.name)))
						return
					}
				}
				if p.GPUMilli, err = strconv.Atoi(col("gpu_milli")); err != nil {
					tr.skip(p.Name, fmt.Sprintf("its gpu_milli %q is not a number", col("gpu_milli")))
					return
				}
				for _, s := range strings.Split(col("gpu_spec"), "|") {
					if s = strings.TrimSpace(s); s != "" && s != "nan" && !slices.Contains(p.GPUSpec, s) {
						p.GPUSpec = append(p.GPUSpec, s)
					}
				}
			}
			each(p)
		})
}
