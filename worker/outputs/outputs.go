package outputs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/backoff"
	"github.com/rlsched/rlsched/internal/clip"
)

// The upload of a run's output dir (RLSCHED_OUTPUT_DIR): a goroutine per
// run (Files.run) sends each file the moment the run closes it after
// writing or renames it into the dir (the watch, watch.go), walks the dir
// every Config.ArtifactSync as a safety net and once more when the run has
// ended, and sends every regular file whose version (size, mtime) it has
// not stored yet, as ArtifactChunks of at most
// artifactChunk bytes. The connection's writer takes the chunks after the
// runs' logs (Link.Collect), within the artifact window the master
// grants (HelloAck.artifact_window, ArtifactAck.window), so output never
// takes the room of logs. TaskFinished waits for the last sync, so a
// finished run's outputs are complete, as its log is.
//
// A file that changes while it is read (its size or mtime differ after a
// chunk) is torn: given up, and sent again at the next sync; at the end it
// is tried finalTries times, the last time sent as read and marked
// changing. Uploads resume by offset after a reconnect, as logs do: the
// master answers "gap" with what it has (0 when it has nothing).

const (
	// artifactChunk is the largest ArtifactChunk payload (the master's
	// artifactpipe.MaxChunk).
	artifactChunk = 1 << 20
	// artifactWindow is the worker's own bound on the artifact bytes sent
	// and not acked on a connection, and its default; a master may grant
	// less or more, up to maxArtifactWindow.
	artifactWindow    = 8 << 20
	maxArtifactWindow = 16 << 20
	// artifactBudget bounds the chunk bytes one writer pass collects.
	artifactBudget = 4 << 20
	// maxUploads bounds the files of one run on their way at once (small
	// files pipeline; a large one takes the window).
	maxUploads = 32
	// maxReadyChunks bounds the chunks one run has read ahead of the
	// writer: the memory of an upload is this many chunks.
	maxReadyChunks = 4
	// maxWalk bounds the files one sync looks at.
	maxWalk = 200_000
	// finalTries is how often the last sync tries a file that changes
	// while it is read.
	finalTries = 3
	// DefaultSync is Config.ArtifactSync's default
	// (ARTIFACT_SYNC_SECONDS).
	DefaultSync = 30 * time.Second
	// A sparse file (its allocated blocks far below its size: a seek past
	// its end, truncate -s) is not uploaded: read, its holes become real
	// bytes on the wire and on the master, so a run could fill the
	// master's disk from a few kilobytes of its own. Far below: under a
	// sparseRatio-th of a size of at least sparseMinSize (a file system's
	// compression rarely reaches that on data that is not mostly zeros).
	sparseMinSize = 64 << 20
	sparseRatio   = 16
)

// Link is what the outputs of every run share: the connection's side of
// them (whether a session is joined, which one, the artifact window its
// master grants), the lock of every run's upload state, and the
// one-restore-at-a-time semaphore. Its mutex is taken after the run
// table's, never before: nothing that holds it takes another lock of the
// worker, and it wakes the writer through kick, which takes none.
//
// Its methods and those of Files are safe for concurrent use.
type Link struct {
	kick       func() // wakes the connection's writer; never blocks
	every      time.Duration
	busy       backoff.Backoff // Min and Max of the pause after a "busy" refusal
	restoreSem chan struct{}   // one run restores at a time (restore.go)

	mu sync.Mutex
	// cond (on mu) wakes uploaders on an ack, a chunk taken, a new
	// session, a stop.
	cond   *sync.Cond
	joined bool   // a session is joined: uploads may read ahead
	gen    uint64 // counts sessions, so uploads and restores know to start again from what was acked
	window int    // the session's artifact window (HelloAck, ArtifactAck)
}

// NewLink makes the link of a worker: each run's outputs are synced once
// an interval (every) while it runs, an upload the master refused as
// "busy" pauses as busy's Min and Max say, and kick, which must never block
// nor take a lock, wakes the writer.
func NewLink(every time.Duration, busy backoff.Backoff, kick func()) *Link {
	l := &Link{kick: kick, every: every, busy: busy, restoreSem: make(chan struct{}, 1)}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Results of an upload.
const (
	upDone    = "done"
	upTorn    = "torn"
	upFenced  = "fenced"
	upStopped = "stopped"
)

// Files is one run's output dir on its way to the master. Its fields
// after "Guarded by Link.mu" are guarded by its link's mutex; known
// belongs to the uploader goroutine (and the restore, which ends before
// the uploader starts).
type Files struct {
	l       *Link
	task    string
	attempt int32
	fence   uint64
	log     zerolog.Logger
	note    func(string) // writes a line into the run's own log; may block, so never called holding Link.mu
	dir     *Dir
	// inputDir is RLSCHED_INPUT_DIR ("" for a run without inputs), set
	// before the restore (SetInputDir), read by it only.
	inputDir string
	final    chan struct{} // closed when the run ended: the last sync
	quit     chan struct{} // closed when the run is forgotten or the worker stops
	tbEnd    chan struct{} // closed when the TensorBoard reader did its last poll

	// Guarded by Link.mu.
	restoring   bool // its files are being restored; the process starts after (restore.go)
	ups         map[string]*upload
	ready       int  // chunks read and not yet collected, all uploads
	finished    bool // the last sync is over: TaskFinished may go
	stored      bool // and the master holds every file of the dir as it is here
	partial     bool // a file the master refused, or holds as read while it changed
	stopped     bool
	started     bool // the goroutines run (and the uploader closes the dir when it ends)
	dirClosed   bool
	metrics     []*pb.Metric
	dropped     int // TensorBoard frames (and over-long tags) dropped
	metricBytes int // what metrics holds, as metricBytesOf counts it
	restoreAck  *pb.ArtifactAck
	restoreCh   chan restoreItem // chunks and refusals of the restore
	lastList    *listing         // the last sync's walk, made by CheckLast

	// Lines for the run's own log on why a file is not kept, under
	// Link.mu; written by flushNotes without it. refNoted: each file once
	// per reason, at most maxRefusalNotes (refuseLocked).
	notes    []string
	refNoted map[string]string
	refFull  bool // maxRefusalNotes reached, and said

	// Uploader goroutine only.
	known map[string]fileVer // versions stored (or refused for good)
}

// upload is one version of one file on its way. Guarded by Link.mu, but
// f, which only the uploader goroutine reads.
type upload struct {
	path     string
	ver      fileVer
	f        *os.File
	next     uint64 // offset of the next chunk to read
	sent     uint64 // end of what the writer sent in this session
	acked    uint64
	eof      bool // the last chunk is read
	ready    []*pb.ArtifactChunk
	gen      uint64 // the session (Link.gen) next, sent and ready are for
	result   string // "" while on its way, else upDone... or the master's refusal
	changing bool   // the last try at the run's end: sent as read
	retryAt  time.Time
	busy     backoff.Backoff
}

// NewFiles makes the outputs of a run (task, attempt, fence), whose dir
// is open (OpenDir, with the run's uid); log is the run's, and note writes
// a line into its own log (where its owner reads why a file is missing).
func (l *Link) NewFiles(task string, attempt int32, fence uint64, log zerolog.Logger, note func(string), dir *Dir) *Files {
	return &Files{l: l, task: task, attempt: attempt, fence: fence, log: log, note: note, dir: dir,
		final: make(chan struct{}), quit: make(chan struct{}), tbEnd: make(chan struct{}),
		ups: map[string]*upload{}, known: map[string]fileVer{}, restoreCh: make(chan restoreItem, 64),
		refNoted: map[string]string{}}
}

// start starts the uploader and the TensorBoard reader once the run's
// process started.
func (o *Files) Start() {
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	if o.started {
		return
	}
	o.started = true
	go o.run()
	go o.followTensorBoard()
}

// end starts the last sync (the run ended, or never starts). Nil-safe.
func (o *Files) End() {
	if o == nil {
		return
	}
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	if !o.started {
		o.finished = true
		o.closeDirLocked()
		return
	}
	select {
	case <-o.final:
	default:
		close(o.final)
	}
}

// stop gives up the uploads: the run is forgotten (killed, fenced, lost)
// or the worker stops. Nil-safe.
func (o *Files) Stop() {
	if o == nil {
		return
	}
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	o.stopLocked()
}

// stopLocked is stop for callers holding Link.mu.
func (o *Files) stopLocked() {
	if o.stopped {
		return
	}
	o.stopped = true
	close(o.quit)
	if !o.started && !o.restoring { // a restore still uses it: unprepare closes it
		o.closeDirLocked()
	}
	o.l.cond.Broadcast()
}

// closeDirLocked closes the dir of outputs that never started, once.
func (o *Files) closeDirLocked() {
	if !o.dirClosed {
		o.dirClosed = true
		o.dir.close()
	}
}

// held reports whether the master holds everything of the output dir,
// once the run is done: every file was stored, or the run never started
// (the dir holds nothing, or what a restore brought from the master).
func (o *Files) Held() bool {
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	return o.stored || !o.started
}

// done reports whether TaskFinished may go: the last sync is over (or
// will never come). Nil-safe: a run without outputs is done.
func (o *Files) Done() bool {
	if o == nil {
		return true
	}
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	return o.finished || o.stopped
}

// run is the uploader goroutine.
func (o *Files) run() {
	defer func() {
		<-o.tbEnd
		o.dir.close()
	}()
	w := newWatcher(o.dir, o.log)
	defer w.close()
	if w != nil {
		// The run started before the watch: what it wrote or renamed in
		// between has no event (a checkpoint written at once waited for
		// the periodic walk). One walk now, setting no gap, so the next
		// event's upload is not held back either.
		o.sync(false)
	}
	tick := time.NewTicker(o.l.every)
	defer tick.Stop()
	var gapUntil time.Time // the next sync the watch starts waits until then
	for {
		select {
		case <-o.quit:
			return
		case <-w.pokeCh():
			if d := time.Until(gapUntil); d > 0 {
				select {
				case <-time.After(d):
				case <-o.quit:
					return
				case <-o.final:
					o.last() // which walks everything the watch saw
					return
				}
			}
			began := time.Now()
			if rels, all := w.take(); all {
				o.sync(false)
			} else {
				o.syncNames(rels)
			}
			gapUntil = time.Now().Add(max(minEventGap, eventDuty*time.Since(began)))
		case <-o.final:
			o.last()
			return
		case <-tick.C:
			o.sync(false)
		}
	}
}

// last is the last sync, after which TaskFinished may go (and the run's
// log closes: its notes are written before).
func (o *Files) last() {
	stored := o.sync(true)
	<-o.tbEnd // its last points go before TaskFinished
	o.l.mu.Lock()
	o.finished = true
	o.stored = stored && !o.partial && !o.stopped
	o.l.mu.Unlock()
	o.l.kick()
}

// CheckLast makes the last sync's walk now, once the run's processes are
// gone and before its log is closed, so that what the last sync will not
// read is said in the run's log too (refuse). Nil-safe.
func (o *Files) CheckLast() {
	if o == nil {
		return
	}
	o.l.mu.Lock()
	skip := !o.started || o.stopped
	o.l.mu.Unlock()
	if skip {
		return
	}
	ls, err := o.dir.walk(maxWalk, nil)
	if err != nil {
		return // the last sync walks again, and says why
	}
	o.refuse(ls)
	o.l.mu.Lock()
	o.lastList = &ls
	o.l.mu.Unlock()
}

// maxRefusalNotes bounds the refused files named in a run's log.
const maxRefusalNotes = 100

// refuse says in the run's log why the files ls refused are not
// uploaded; a file kept on the worker (Refused.Kept) makes the outputs
// partial, so the dir is kept. Without Link.mu held.
func (o *Files) refuse(ls listing) {
	o.l.mu.Lock()
	for _, r := range ls.refused {
		o.refuseLocked(r)
	}
	o.partial = o.partial || ls.kept
	o.l.mu.Unlock()
	o.flushNotes()
}

// refuseLocked queues r's line for the run's log (flushNotes writes it),
// each file once per reason, at most maxRefusalNotes and then one line
// that says there are more.
func (o *Files) refuseLocked(r Refused) {
	o.partial = o.partial || r.Kept
	switch {
	case o.refNoted[r.Rel] == r.Why:
	case len(o.refNoted) < maxRefusalNotes:
		o.refNoted[r.Rel] = r.Why
		o.notes = append(o.notes, r.Error())
	case !o.refFull:
		o.refFull = true
		o.notes = append(o.notes, fmt.Sprintf("more files of the output dir are not uploaded; the first %d are named above, the worker's log names the rest", maxRefusalNotes))
	}
}

// sync sends what changed since the last one. The last sync (final)
// reports whether every file the walk found was then stored, or refused
// (outputs.partial).
func (o *Files) sync(final bool) (all bool) {
	var ls listing
	var last *listing
	if final {
		o.l.mu.Lock()
		last, o.lastList = o.lastList, nil
		o.l.mu.Unlock()
	}
	if last != nil {
		ls = *last // its refusals are said
	} else {
		var err error
		if ls, err = o.dir.walk(maxWalk, nil); err != nil {
			o.log.Warn().Err(err).Msg("cannot list the run's output dir")
			return false
		}
		o.refuse(ls)
	}
	files, skipped, truncated := ls.files, ls.skipped, ls.truncated
	if final {
		defer func() {
			all = skipped == 0 && !truncated
			for _, w := range files {
				all = all && o.known[w.rel] == w.ver
			}
		}()
	}
	if skipped > 0 || truncated {
		o.log.Warn().Int("skipped", skipped).Bool("truncated", truncated).Int("files", len(files)).
			Msg("some files of the output dir are not uploaded: names rlsched refuses (control characters, over 1024 bytes), too deep, or past the first 200,000")
	}
	todo := files[:0]
	for _, w := range files {
		if o.known[w.rel] != w.ver {
			todo = append(todo, w)
		}
	}
	defer o.flushNotes()
	for try := 1; len(todo) > 0; try++ {
		torn := o.upload(todo, final && try == finalTries)
		if !final || try == finalTries {
			return
		}
		todo = torn
	}
	return
}

// syncNames sends the files rels (those the watch saw written) whose
// version the master does not hold; a torn one goes at the next sync.
func (o *Files) syncNames(rels []string) {
	slices.Sort(rels)
	list := make([]walked, 0, len(rels))
	for _, r := range rels {
		list = append(list, walked{rel: r}) // upload reads the version from the open file
	}
	if len(list) > 0 {
		o.upload(list, false)
		o.flushNotes()
	}
}

// flushNotes writes the queued lines into the run's log. Without Link.mu:
// a full log blocks the writer until the connection drains it, which needs
// that mutex.
func (o *Files) flushNotes() {
	o.l.mu.Lock()
	notes := o.notes
	o.notes = nil
	o.l.mu.Unlock()
	for _, n := range notes {
		o.note(n)
	}
}

// upload sends the files of list (at most maxUploads at once) and returns
// those that were torn.
func (o *Files) upload(list []walked, changing bool) (torn []walked) {
	l := o.l
	l.mu.Lock()
	defer l.mu.Unlock()
	next := 0
	for {
		if o.stopped {
			for _, u := range o.ups {
				o.endLocked2(u, upStopped)
			}
			return nil
		}
		// Answers first, then new uploads in the room they left: a wait
		// with nothing on its way would never be woken.
		for p, u := range o.ups {
			if u.result == "" {
				continue
			}
			switch {
			case u.result == upDone:
				o.known[p] = u.ver
				o.partial = o.partial || u.changing
			case u.result == upTorn:
				torn = append(torn, walked{p, u.ver})
			case u.result == upFenced:
				o.log.Warn().Msg("the master refused the run's outputs as fenced: no longer uploading them")
				o.stopLocked()
			case len(u.result) > 9 && u.result[:9] == "refused: ":
				o.known[p] = u.ver // never this version again
				o.partial = true
				o.log.Info().Str("path", p).Str("why", u.result[9:]).Msg("the master does not keep an output file")
				o.refuseLocked(Refused{Rel: p, Why: "the master does not keep it: " + clip.String(u.result[9:], 512)})
			default:
				o.log.Warn().Str("path", p).Str("why", u.result).Msg("the master could not store an output file; trying again at the next sync")
			}
			o.endLocked2(u, u.result)
		}
		for next < len(list) && len(o.ups) < maxUploads {
			w := list[next]
			next++
			l.mu.Unlock()
			f, ver, err := o.openVersion(w.rel)
			var ref *Refused
			if errors.As(err, &ref) {
				o.refuse(listing{refused: []Refused{*ref}, kept: ref.Kept})
			}
			l.mu.Lock()
			if err != nil {
				if ref == nil && !errors.Is(err, fs.ErrNotExist) {
					o.log.Info().Err(err).Msg("not uploading an output file")
				}
				continue
			}
			if o.known[w.rel] == ver {
				f.Close()
				continue
			}
			o.ups[w.rel] = &upload{path: w.rel, ver: ver, f: f, gen: l.gen, changing: changing}
		}
		if next == len(list) && len(o.ups) == 0 {
			return torn
		}
		if u := o.wantsChunkLocked(); u != nil {
			o.readLocked(u)
			continue
		}
		if !o.answeredLocked() { // an answer that came while the lock was let go woke nobody
			l.cond.Wait()
		}
	}
}

// answeredLocked reports whether an upload has its answer.
func (o *Files) answeredLocked() bool {
	for _, u := range o.ups {
		if u.result != "" {
			return true
		}
	}
	return false
}

// endLocked2 closes an upload and removes it.
func (o *Files) endLocked2(u *upload, result string) {
	u.result = result
	if u.f != nil {
		u.f.Close()
		u.f = nil
	}
	o.dropReadyLocked(u)
	delete(o.ups, u.path)
}

// openVersion opens rel and returns its version, from the open file.
func (o *Files) openVersion(rel string) (*os.File, fileVer, error) {
	f, err := o.dir.open(rel)
	if err != nil {
		return nil, fileVer{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fileVer{}, err
	}
	return f, verOf(fi), nil
}

// wantsChunkLocked picks an upload that may read its next chunk now: it
// has room ahead of the writer, is not paused, and the worker is joined.
func (o *Files) wantsChunkLocked() *upload {
	if !o.l.joined || o.ready >= maxReadyChunks {
		return nil
	}
	now := time.Now()
	for _, u := range o.ups {
		if u.result == "" && !u.eof && len(u.ready) < 2 && !now.Before(u.retryAt) && u.gen == o.l.gen {
			return u
		}
	}
	return nil
}

// readLocked reads u's next chunk (without the lock) and queues it for the
// writer, unless u was rewound or ended meanwhile. A version that changed
// is torn, except on the last try (changing), which sends what it reads.
// Caller holds Link.mu.
func (o *Files) readLocked(u *upload) {
	l := o.l
	off, gen, f := u.next, u.gen, u.f
	n := int(min(uint64(artifactChunk), uint64(max(u.ver.size, 0))-min(off, uint64(max(u.ver.size, 0)))))
	l.mu.Unlock()
	buf := getChunkBuf()[:n]
	got, rerr := f.ReadAt(buf, int64(off))
	torn := false
	if !u.changing {
		fi, err := f.Stat()
		torn = err != nil || verOf(fi) != u.ver || got < n
	}
	l.mu.Lock()
	if u.result != "" || u.gen != gen || u.next != off {
		PutChunkBuf(buf)
		return // rewound or ended while reading
	}
	switch {
	case rerr != nil && !errors.Is(rerr, io.EOF):
		PutChunkBuf(buf)
		u.result = "failed: cannot read it on the worker: " + rerr.Error()
		return
	case torn:
		PutChunkBuf(buf)
		u.result = upTorn
		return
	}
	last := off+uint64(got) >= uint64(u.ver.size) || got < n
	c := &pb.ArtifactChunk{TaskId: o.task, Attempt: o.attempt, Fence: o.fence, Path: u.path, Offset: off, Data: buf[:got],
		Last: last, Size: u.ver.size, ModifiedUnixNs: u.ver.modNs, Changing: last && u.changing}
	u.ready = append(u.ready, c)
	u.next += uint64(got)
	u.eof = last
	o.ready++
	l.kick()
}

// dropReadyLocked throws away u's chunks not yet sent.
func (o *Files) dropReadyLocked(u *upload) {
	for _, c := range u.ready {
		PutChunkBuf(c.Data)
	}
	o.ready -= len(u.ready)
	u.ready = nil
}

// rewindLocked makes u send again from offset (a new session, a gap, a busy
// refusal).
func (o *Files) rewindLocked(u *upload, offset uint64) {
	o.dropReadyLocked(u)
	u.next, u.sent, u.eof, u.gen = offset, offset, false, o.l.gen
}

// ack handles a master's ArtifactAck; o is the outputs of the run it
// names, nil when no run of this worker has them.
func (l *Link) Ack(m *pb.ArtifactAck, o *Files) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := m.GetWindow(); w > 0 {
		l.window = min(max(int(w), 1), maxArtifactWindow)
	}
	if o == nil {
		return
	}
	if m.GetRestore() {
		o.restoreRefusedLocked(m) // restore.go
		return
	}
	u := o.ups[m.GetPath()]
	if u == nil || u.ver != (fileVer{m.GetSize(), m.GetModifiedUnixNs()}) || u.result != "" {
		return // an older version's, or one already answered
	}
	switch e := m.GetError(); {
	case e == "":
		u.acked = max(u.acked, m.GetOffset())
		u.busy.Reset()
		if m.GetDone() {
			u.result = upDone
		}
	case e == "gap":
		// The master has Offset bytes (a new master may have none).
		u.acked = m.GetOffset()
		o.rewindLocked(u, m.GetOffset())
	case e == "busy":
		o.rewindLocked(u, max(u.acked, m.GetOffset()))
		u.busy.Min, u.busy.Max = l.busy.Min, l.busy.Max
		d := u.busy.Delay()
		u.retryAt = time.Now().Add(d)
		time.AfterFunc(d, l.wake)
	case e == "fenced":
		u.result = upFenced
	default: // "refused: …" or "failed: …"
		u.result = e
	}
	l.cond.Broadcast()
	l.kick()
}

// wake wakes the uploaders (a pause ended).
func (l *Link) wake() {
	l.mu.Lock()
	l.cond.Broadcast()
	l.mu.Unlock()
}

// join starts every upload and restore of runs again from what the master
// acked, for a new session whose master grants window (0: the default).
func (l *Link) Join(window uint32, runs []*Files) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.window = artifactWindow
	if window > 0 {
		l.window = min(int(window), maxArtifactWindow)
	}
	l.joined = true
	l.gen++
	for _, o := range runs {
		for _, u := range o.ups {
			o.rewindLocked(u, u.acked)
		}
		o.restoreAck = nil
	}
	l.cond.Broadcast()
}

// leave notes that the session ended: uploads stop reading ahead.
func (l *Link) Leave() {
	l.mu.Lock()
	l.joined = false
	l.mu.Unlock()
}

// collect appends, after every run's logs, each run's restore request,
// its TensorBoard points and its chunks, the chunks while the connection's
// artifact window has room.
func (l *Link) Collect(msgs []proto.Message, runs []*Files) []proto.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	window := l.window
	if window <= 0 {
		window = artifactWindow
	}
	inflight := 0
	for _, o := range runs {
		for _, u := range o.ups {
			if u.gen == l.gen && u.sent > u.acked {
				inflight += int(u.sent - u.acked)
			}
		}
	}
	used, popped := 0, false
	for _, o := range runs {
		if o.restoreAck != nil {
			msgs = append(msgs, o.restoreAck)
			o.restoreAck = nil
		}
		if len(o.metrics) > 0 {
			n := min(len(o.metrics), maxMetricFrames)
			for _, m := range o.metrics[:n] {
				msgs = append(msgs, m)
				o.metricBytes -= metricBytesOf(m)
			}
			o.metrics = append(o.metrics[:0], o.metrics[n:]...)
		}
		for _, u := range o.ups {
			for len(u.ready) > 0 && used < artifactBudget && (inflight == 0 || inflight+len(u.ready[0].Data) <= window) {
				c := u.ready[0]
				u.ready[0] = nil
				u.ready = u.ready[1:]
				o.ready--
				msgs = append(msgs, c)
				u.sent = c.Offset + uint64(len(c.Data))
				inflight += len(c.Data)
				used += len(c.Data)
				popped = true
			}
		}
	}
	if popped {
		l.cond.Broadcast()
	}
	return msgs
}

// Chunk buffers are reused once written to the connection.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, artifactChunk); return &b }}

func getChunkBuf() []byte { return (*chunkBufs.Get().(*[]byte))[:artifactChunk] }

func PutChunkBuf(b []byte) {
	if cap(b) == artifactChunk {
		b = b[:artifactChunk]
		chunkBufs.Put(&b)
	}
}
