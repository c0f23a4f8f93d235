package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/worker/isolation"
)

// The disk watchdog (issue 26: "a run that writes 100 GB to /tmp"). A
// control group bounds a run's memory, cores and processes, not the disk
// it fills: a run that fills its outputs' disk or /tmp stops every other
// run there, and the worker, from writing. Every Config.diskEvery the
// worker reads the free space of each disk its runs write to (a statfs
// each); only when a run's limit applies (DISK_MAX_MB) or a disk is short
// (below DISK_MIN_FREE_PERCENT free) does it measure what each run holds
// (isolation.DiskUse: its output and private dirs, and under a uid of its
// own what that uid owns in /tmp and /var/tmp, read in one walk for every
// run). A run over its limit, and on a disk that ran short the run holding
// the most of it, are stopped (SIGTERM, the grace, SIGKILL, as any stop)
// and end FAILED with reason disk and the worker's sentence (core.ReasonDisk).
// /dev/shm is memory, which the run's memory limit counts already; a
// RUN_AS=user or RUN_AS=none run is measured by its own dirs only (what its
// uid keeps in /tmp is not the run's alone).

// sharedTmp are the temporary dirs every uid may write to on disk.
var sharedTmp = []string{"/tmp", "/var/tmp"}

// diskRun is a run the watchdog measures: its dirs and its dynamic uid (0:
// none).
type diskRun struct {
	r        *run
	dirs     []string
	uid      uint32
	bytes    int64            // what it holds, in all
	onDisk   map[uint64]int64 // of that, on each file system
	stopping bool             // a disk stop of it is under way
}

// diskLoop runs the watchdog until ctx is done.
func (a *agent) diskLoop(ctx context.Context) {
	if a.cfg.DiskMaxMB == 0 && a.cfg.DiskMinFreePercent < 0 {
		return
	}
	tick := time.NewTicker(a.cfg.diskEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.checkDisk()
		}
	}
}

// checkDisk is one look of the watchdog.
func (a *agent) checkDisk() {
	runs := a.tab.diskRuns()
	if len(runs) == 0 {
		return
	}
	// The disks the runs write to, and those that are short.
	paths := append([]string(nil), sharedTmp...)
	for _, d := range runs {
		paths = append(paths, d.dirs...)
	}
	type disk struct {
		path       string
		free, size int64
		short      bool
	}
	disks := map[uint64]*disk{}
	short := false
	for _, p := range paths {
		dev, free, size, err := isolation.FileSystem(p)
		if err != nil || disks[dev] != nil {
			continue // gone meanwhile (a run's end), or known
		}
		dk := &disk{path: p, free: free, size: size}
		dk.short = a.cfg.DiskMinFreePercent > 0 && size > 0 && free*100 < int64(a.cfg.DiskMinFreePercent)*size
		short = short || dk.short
		disks[dev] = dk
	}
	if a.cfg.DiskMaxMB == 0 && !short {
		return
	}

	// What each run holds, and where.
	byUID := map[uint32]*diskRun{}
	for _, d := range runs {
		d.onDisk = map[uint64]int64{}
		for _, dir := range d.dirs {
			var n int64
			dev, _ := isolation.DiskUse(dir, func(uint32) *int64 { return &n })
			d.onDisk[dev] += n
			d.bytes += n
		}
		if d.uid != 0 {
			byUID[d.uid] = d
		}
	}
	if len(byUID) > 0 {
		for _, root := range sharedTmp {
			held := map[uint32]*int64{}
			for uid := range byUID {
				held[uid] = new(int64)
			}
			dev, _ := isolation.DiskUse(root, func(uid uint32) *int64 { return held[uid] })
			for uid, n := range held {
				byUID[uid].onDisk[dev] += *n
				byUID[uid].bytes += *n
			}
		}
	}

	var stop []diskStop
	if limit := a.cfg.DiskMaxMB << 20; limit > 0 {
		for _, d := range runs {
			if !d.stopping && d.bytes > limit {
				d.stopping = true
				stop = append(stop, diskStop{d.r, fmt.Sprintf("used %s of disk (its outputs, HOME, TMPDIR and its files in /tmp and /var/tmp), over the %s a run may fill on this worker (DISK_MAX_MB); keep less on disk",
					mibComma(d.bytes>>20), mibComma(a.cfg.DiskMaxMB))})
			}
		}
	}
	for dev, dk := range disks {
		if !dk.short {
			continue
		}
		// One run a disk at a time: a stopped run's files go with its end,
		// and until then the disk still looks short.
		var top *diskRun
		busy := false
		for _, d := range runs {
			busy = busy || (d.stopping && d.onDisk[dev] > 0)
			if !d.stopping && (top == nil || d.onDisk[dev] > top.onDisk[dev]) {
				top = d
			}
		}
		// A run holding under a hundredth of the disk did not fill it:
		// stopping it would free nothing worth a run.
		if busy || top == nil || top.onDisk[dev]*100 < dk.size {
			a.log.Warn().Str("disk", dk.path).Int64("free_mb", dk.free>>20).Int64("size_mb", dk.size>>20).
				Bool("stopping_one", busy).Msg("a disk runs write to is short of space, and no run holds a hundredth of it")
			continue
		}
		top.stopping = true
		stop = append(stop, diskStop{top.r, fmt.Sprintf("held the most of the disk of %s (%s) when it had %d%% free, below the %d%% this worker keeps free (DISK_MIN_FREE_PERCENT); keep less on disk",
			dk.path, mibComma(top.onDisk[dev]>>20), dk.free*100/dk.size, a.cfg.DiskMinFreePercent)})
	}
	a.tab.diskStop(stop)
}

type diskStop struct {
	r   *run
	err string
}

// diskRuns lists the runs whose processes run, each with its dirs, and
// those a disk stop is under way for.
func (t *runTable) diskRuns() []*diskRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*diskRun
	for _, r := range t.runs {
		if r.cmd == nil || r.forgotten {
			continue
		}
		if r.reaped && r.stopReason != core.ReasonDisk {
			continue // its files go with its end
		}
		d := &diskRun{r: r, stopping: r.stopErr != ""}
		if !r.reaped {
			d.uid = r.ident.DynamicUID() // once reaped, the uid may be another run's
		}
		for _, dir := range []string{r.dirs.Out, r.dirs.Private} {
			if dir != "" {
				d.dirs = append(d.dirs, dir)
			}
		}
		out = append(out, d)
	}
	return out
}

// diskStop stops the runs the watchdog judged, unless they ended or another
// watchdog stopped them meanwhile.
func (t *runTable) diskStop(stop []diskStop) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range stop {
		r := s.r
		if r.reaped || r.stopErr != "" || t.runs[r.id] != r {
			continue
		}
		r.stopReason, r.stopErr = core.ReasonDisk, s.err
		r.log.Warn().Msg("stopping the run: " + s.err)
		t.watchStopLocked(r)
	}
}
