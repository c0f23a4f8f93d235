package store

import (
	"context"
	"errors"
	"time"

	"github.com/rlsched/rlsched/core"
)

// ErrBadCursor means a ListTasks cursor was not one this store handed out
// (malformed or tampered with); the API answers 400.
var ErrBadCursor = errors.New("bad cursor")

// ErrLastAdmin refuses a change that would leave no enabled admin (the
// API answers 409).
var ErrLastAdmin = errors.New("it would leave no enabled admin; make another user an admin first")

// UserPatch is a change of a user; nil fields stay as they are.
type UserPatch struct {
	Role         *core.Role
	Disabled     *bool
	PasswordHash *string
}

// UserSummary is a user with a summary of their runs.
type UserSummary struct {
	core.User
	Runs       int     // every run, any status
	ActiveRuns int     // DISPATCHED or RUNNING
	GPUSeconds float64 // GPUs × time of every started run, those still going until now
}

// RecordEdit is a change of a run's record (EditRecord); nil fields stay
// as they are. UpdatedAt is set with it.
type RecordEdit struct {
	Name, Note *string
	Baseline   *bool
	// Tags, when set, makes the run's new tags from its current ones. The
	// write is a compare-and-swap on the tags read, and Tags is called
	// again with the new ones when another edit changed them in between,
	// so two edits at once (one adding a tag, one removing another) both
	// hold. It must not keep cur.
	Tags func(cur []string) ([]string, error)
}

// Filter selects runs for listing. Zero fields match everything; the
// fields given must all hold.
type Filter struct {
	Status  core.Status
	User    string // username
	Project string
	Limit   int    // default 50, at most 500
	Cursor  string // opaque, from a previous page
	// Tag: the run carries this tag. Name: its name contains this, ASCII
	// letters compared without case; Note: its note does (issue 30).
	// Sweep: a member of this sweep (any of its runs, retried ones too).
	// RerunOf: a rerun of this run.
	Tag, Name, Note, Sweep, RerunOf string
	// Baseline, when set, is the run's baseline mark (issue 30).
	Baseline *bool
	// Params: each names a param the run's params hold with an equal value
	// (ParamFilter).
	Params []ParamFilter
	// CreatedAfter and CreatedBefore bound the creation time: runs created
	// at or after the one, and before the other (zero: unbounded).
	CreatedAfter, CreatedBefore time.Time
}

// Expect is the condition of a fenced update: the row must still carry this
// fence and this status.
type Expect struct {
	Fence  uint64
	Status core.Status
}

// Update is one row of UpdateTasks: Task's mutable fields, written only if
// the row still matches Expect.
type Update struct {
	Task   *core.Task
	Expect Expect
	// Charge, when set, is added to its user's usage (AddUsage, decaying
	// with ChargeHalfLife) in the same transaction, only if the row
	// matched: a run's end and its charge are one commit (Accruing).
	Charge         *UsageCharge
	ChargeHalfLife time.Duration
}

// Store is implemented by every durable backend. All methods are safe for
// concurrent use.
type Store interface {
	// CreateUser inserts u (ID and CreatedAt are set). The first user of an
	// empty store is made ADMIN whatever u.Role says. core.ErrConflict when
	// the username is taken.
	CreateUser(ctx context.Context, u *core.User) error
	UserByName(ctx context.Context, username string) (core.User, error)
	UserByID(ctx context.Context, id int64) (core.User, error)
	// BumpTokenVersion raises the user's token version by one, revoking
	// every token issued before (logout), and returns the new version;
	// core.ErrNotFound for an unknown id.
	BumpTokenVersion(ctx context.Context, id int64) (int64, error)
	// ListUsers returns every user not deleted, by id, with a summary of
	// their runs; now ends the runs still going for GPUSeconds.
	ListUsers(ctx context.Context, now time.Time) ([]UserSummary, error)
	// UpdateUser applies p to the user in one write and returns the user
	// as written. The token version goes up with it when the role changes,
	// the user is disabled or gets a new password (tokens name the role
	// they were issued with; a disabled user's and an old password's
	// sign-ins end). core.ErrNotFound for an unknown or deleted id;
	// ErrLastAdmin when it would leave no enabled admin.
	UpdateUser(ctx context.Context, id int64, p UserPatch) (core.User, error)
	// DeleteUser removes the account: it can no longer sign in, its tokens
	// stop working, its name is free again, and its runs stay, owned by
	// core.DeletedUsername(id). core.ErrNotFound for an unknown or deleted
	// id; ErrLastAdmin for the last enabled admin.
	DeleteUser(ctx context.Context, id int64) error
	// RecordLogin sets the user's last sign-in time; core.ErrNotFound for
	// an unknown id.
	RecordLogin(ctx context.Context, id int64, at time.Time) error
	// SetNotify replaces the user's notification settings; core.ErrNotFound
	// for an unknown or deleted id.
	SetNotify(ctx context.Context, id int64, n core.Notify) error

	// CreateTask inserts a new run (status QUEUED, fence 0). CreatedAt and
	// UpdatedAt are set when zero.
	CreateTask(ctx context.Context, t *core.Task) error
	// CreateTasks is CreateTask for many runs in one transaction (one
	// durable commit). errs[i] is the result of ts[i], as CreateTask would
	// return it: a row that fails (core.ErrConflict, core.ErrNotFound, an
	// invalid run) is not written and does not fail the others. An error of
	// the transaction itself (begin, commit, a lost connection) is every
	// row's error, and then no row is written.
	CreateTasks(ctx context.Context, ts []*core.Task) []error
	Task(ctx context.Context, id string) (core.Task, error)
	// ListTasks returns runs newest first and a cursor for the next page ("" at the end).
	ListTasks(ctx context.Context, f Filter) ([]core.Task, string, error)
	// QueuedTasks returns up to limit QUEUED runs, highest priority first,
	// then oldest; when more are queued, a window fair by construction,
	// each owner's runs of one sweep (or none) getting their share
	// (sqlutil.FairQueue).
	QueuedTasks(ctx context.Context, limit int) ([]core.Task, error)
	// QueuedCount is how many runs of the user are QUEUED
	// (MAX_QUEUED_PER_USER).
	QueuedCount(ctx context.Context, userID int64) (int, error)
	// ActiveTasks returns every DISPATCHED or RUNNING run (for recovery after a restart).
	ActiveTasks(ctx context.Context) ([]core.Task, error)
	// UpdateTask writes every mutable field of t (status, attempt, fence,
	// worker, gpuIndices, exitCode, error, finalReward, startedAt, finishedAt)
	// only if the row still has exp's fence and status; otherwise it returns
	// core.ErrFenced (or core.ErrNotFound) and writes nothing. UpdatedAt is set.
	UpdateTask(ctx context.Context, t *core.Task, exp Expect) error
	// UpdateTasks is UpdateTask for many rows in one transaction (one
	// durable commit), applied in order (a later row of the same run sees
	// the earlier one's write). errs[i] is the result of us[i]: nil,
	// core.ErrFenced or core.ErrNotFound (or an invalid row's error); a row
	// that fails writes nothing and does not fail the others. An error of
	// the transaction itself is every row's error, and then no row is
	// written.
	UpdateTasks(ctx context.Context, us []Update) []error
	// SetFinalReward records a run's final reward without touching its state.
	SetFinalReward(ctx context.Context, id string, v float64) error
	// EditRecord writes the fields of a run's record that its owner edits
	// after submission (name, tags, note, baseline: RecordEdit) and returns
	// the run as written. It is not fenced and touches no other field, so
	// it neither loses nor is lost to a concurrent state change (UpdateTask
	// writes none of them). core.ErrNotFound for an unknown run; an error of
	// e.Tags is returned as it is.
	EditRecord(ctx context.Context, id string, e RecordEdit) (core.Task, error)
	// MaxFence returns the highest fence any run carries, so a lease backend
	// that lost its counter can continue above it.
	MaxFence(ctx context.Context) (uint64, error)
	// RequestCancel durably records that a user asked to cancel the run,
	// so that whichever master holds (or later re-adopts) its worker stops
	// it, also after a master restart. Recording it twice is not an error;
	// core.ErrNotFound when the run does not exist.
	RequestCancel(ctx context.Context, id string) error
	// CancelRequested returns which of ids have a recorded cancel request
	// (a map of only those).
	CancelRequested(ctx context.Context, ids []string) (map[string]bool, error)

	// PutCodeDiff stores a submission's diff (`git diff HEAD`, 1 byte to
	// core.MaxCodeDiffBytes) once by content and returns its id, the
	// sha256 of its bytes in hex, for the runs' Code.DiffID. Storing the
	// same bytes again is not an error. A diff nothing names any more (its
	// submission failed) stays; it is never read.
	PutCodeDiff(ctx context.Context, diff []byte) (string, error)
	// CodeDiff returns the diff stored under id; core.ErrNotFound when none.
	CodeDiff(ctx context.Context, id string) ([]byte, error)

	// AppendMetrics stores points of a run.
	AppendMetrics(ctx context.Context, taskID string, pts []core.MetricPoint) error
	// Metrics returns series by name, each as [step, value] pairs in step
	// order; names nil means all.
	Metrics(ctx context.Context, taskID string, names []string) (map[string][][2]float64, error)
	// MetricsTimed is Metrics with each point's time (Unix ms, NaN when
	// none was stored): [step, value, t].
	MetricsTimed(ctx context.Context, taskID string, names []string) (map[string][][3]float64, error)

	// Priority, fair share and quotas (scheduling.go).
	Scheduling
	// Runs that wait for runs (deps.go) and pipelines of them (pipelines.go).
	Dependencies
	Pipelines

	// Sweeps (sweeps.go).

	// CreateSweep stores sw and its members' first runs, members[i] being
	// member i, in one transaction: all of them or, on any error, nothing.
	// Each run is created as CreateTask creates one, with SweepID sw.ID; it
	// needs an ID (core.ErrConflict when taken). sw.ID, UserID and
	// CreatedAt must be set; sw.User is set from the owner.
	CreateSweep(ctx context.Context, sw *Sweep, members []*core.Task) error
	// Sweep returns the sweep with id, Counts filled; core.ErrNotFound.
	Sweep(ctx context.Context, id string) (Sweep, error)
	// ListSweeps returns sweeps newest first with their Counts, and a
	// cursor for the next page ("" at the end); ErrBadCursor as ListTasks.
	ListSweeps(ctx context.Context, f SweepFilter) ([]Sweep, string, error)
	// AddSweepMembers appends members as members from, from+1, ... of sweep
	// id (a tpe sweep's proposals), each run created as CreateSweep creates
	// one and owned by the sweep's owner, in one transaction, only if the
	// sweep still has from members: else core.ErrConflict (another master
	// added them first) and nothing is written; core.ErrNotFound for an
	// unknown sweep.
	AddSweepMembers(ctx context.Context, id string, from int, members []*core.Task) error
	// SweepRuns returns the latest run of each member of sweep id, in
	// member order; core.ErrNotFound for an unknown sweep.
	SweepRuns(ctx context.Context, id string) ([]core.Task, error)
	// RetrySweep gives every member of sweep id whose latest run ended
	// FAILED, CANCELLED or TIMEOUT a new run, rerun(latest) (its ID set,
	// created as CreateTask creates one, with the sweep's SweepID), which
	// becomes the member's latest run; all in one transaction, so two
	// retries at once never rerun a member twice. It returns the new runs
	// in member order; core.ErrNotFound for an unknown sweep.
	RetrySweep(ctx context.Context, id string, rerun func(latest core.Task) core.Task) ([]core.Task, error)
	// SweepMetrics returns each member's latest run of sweep id, in member
	// order, with its series name (none when name is ""). It reads every
	// member in a constant number of queries, whatever the sweep's size;
	// core.ErrNotFound for an unknown sweep. The version is
	// SweepSeriesVersion's as the answer was read ("" without a name).
	SweepMetrics(ctx context.Context, id, name string) (ms []MemberSeries, version string, err error)
	// PackSeries stores the series of every ended run among ids, each
	// name, packed: the form SweepMetrics reads in one row per run. Runs
	// not ended, unknown, already packed or without points are skipped;
	// a pack is dropped when its run gets a point (AppendMetrics), so it
	// never hides one. PackingAtEnd calls it after runs end.
	PackSeries(ctx context.Context, ids []string) error
	// SweepSeriesVersion names the state of what SweepMetrics(id, name)
	// answers, cheaply (no series read): equal versions mean an equal
	// answer, so a caller may keep an answer and reuse it while the version
	// stays. It is "" (never reuse) while a member is queued or active.
	SweepSeriesVersion(ctx context.Context, id, name string) (string, error)
	// KeepSweepDecisions stores early-stopping decisions of sweep id's
	// members, each unless a decision of its run at its rung is kept
	// already (the first kept stands, also when two masters race).
	KeepSweepDecisions(ctx context.Context, id string, ds []SweepDecision) error
	// SweepDecisions returns the decisions kept of sweep id, by rung, then
	// in the order they were made; none for an unknown sweep.
	SweepDecisions(ctx context.Context, id string) ([]SweepDecision, error)
	// SweepLimits returns, of the sweeps ids, those with a cap on their
	// active members (maxParallel > 0), with the cap and how many of their
	// runs are DISPATCHED or RUNNING. Unknown ids are left out.
	SweepLimits(ctx context.Context, ids []string) (map[string]core.SweepLimit, error)

	// AddWarning appends w to the run's warnings (core.Task.Warnings), not a
	// state change: no fence, no other field touched, never lost to a
	// concurrent UpdateTask. A run that holds core.MaxWarnings already
	// keeps them and drops w without an error. core.ErrNotFound for an
	// unknown run.
	AddWarning(ctx context.Context, id string, w core.Warning) error

	// PutArtifact records a stored version of a run's output file: the row
	// of (task, attempt, path) is inserted or replaced by a. core.ErrNotFound
	// for an unknown run.
	PutArtifact(ctx context.Context, a core.Artifact) error
	// Artifacts lists a run's files sorted by path: with attempt 0 the
	// newest version of each path (the row of the highest attempt that has
	// it), else the rows of that attempt. Never nil; empty for a run (or
	// attempt) without files, also an unknown one.
	Artifacts(ctx context.Context, taskID string, attempt int) ([]core.Artifact, error)
	// Artifact is one row as Artifacts would list it (attempt 0: the
	// newest); core.ErrNotFound when there is none.
	Artifact(ctx context.Context, taskID, path string, attempt int) (core.Artifact, error)
	// ArtifactUsage is what a run keeps: its rows (every attempt's) and the
	// sum of their sizes, for ARTIFACT_MAX_RUN_BYTES.
	ArtifactUsage(ctx context.Context, taskID string) (files int, bytes int64, err error)
	// ArtifactBytes is the sum of the sizes of the rows (every attempt's)
	// of userID's runs, or of every run when userID is 0, for
	// ARTIFACT_MAX_MB_PER_USER and ARTIFACT_MAX_MB. An unknown user keeps 0.
	ArtifactBytes(ctx context.Context, userID int64) (int64, error)

	// CountByStatus returns how many runs are in each status.
	CountByStatus(ctx context.Context) (map[core.Status]int, error)
	Ping(ctx context.Context) error
	Kind() string // "sqlite" or "mysql"
	Close() error
}
