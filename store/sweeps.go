package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/sweep"
)

// Sweep is the record of a sweep (API.md "Sweeps and seed groups"). Its
// members are numbered 0..Members-1; each has one run or more (a retry
// adds one), the last of which is the member's latest run.
type Sweep struct {
	ID      string
	Name    string
	Project string
	UserID  int64
	User    string // the owner's username, set by the store
	// MaxParallel caps the members DISPATCHED or RUNNING at once; 0: no cap.
	MaxParallel int
	Members     int
	// Spec is the body the sweep was submitted with (compact JSON), so a
	// sweep can be read back and submitted again.
	Spec      json.RawMessage
	CreatedAt time.Time
	// Counts are the members' latest runs by status, every status present
	// (zero or not); filled by reads.
	Counts map[core.Status]int
}

// MemberSeries is a member's latest run as SweepMetrics reads it: what
// seed groups and their curves need of it, and one series.
type MemberSeries struct {
	TaskID      string
	Params      json.RawMessage
	Status      core.Status
	FinalReward *float64
	// Points are the series as [step, value] pairs in step order; nil when
	// the run has none.
	Points [][2]float64
}

// SweepDecision is one early-stopping decision of a member's run at an
// ASHA rung (sweep/earlystop.Decision, with the rung counted from 0): it
// continued (Stop false) or was stopped, by Value against Cut over Peers
// values at the rung.
type SweepDecision struct {
	TaskID    string
	Rung      int
	Step      int64 // the rung's step
	Value     float64
	Cut       float64
	Peers     int
	Stop      bool
	DecidedAt time.Time
}

// SweepFilter selects sweeps for listing; zero fields match everything.
type SweepFilter struct {
	User   string // username
	Limit  int    // default 50, at most 500
	Cursor string // opaque, from a previous page
}

// ParamKind is the JSON type of a ParamFilter's value.
type ParamKind uint8

const (
	ParamNumber ParamKind = iota
	ParamString
	ParamBool
	ParamNull
)

// ParamFilter matches a run whose params hold Key with a value equal to
// this one as JSON values: numbers compare as IEEE doubles, so 1e-3 equals
// 0.001 and 1 equals 1.0; a number never equals a string ("3" is not 3).
type ParamFilter struct {
	Key  string
	Kind ParamKind
	Num  float64
	Str  string
	Bool bool
}

// ParseParamFilter reads the filter ?param.<key>=<value> (key must be a
// param name, as /api/train's): a value that is
// a JSON number, true, false, null or a JSON string is that; anything else
// is the string as written (param.env=CartPole-v1). An object or array is
// an error, as is a number JSON can write but a double cannot hold.
func ParseParamFilter(key, value string) (ParamFilter, error) {
	f := ParamFilter{Key: key}
	if !sweep.ValidParamName(key) {
		return f, fmt.Errorf("%q is not a param name (1–64 of [A-Za-z0-9_.-], not starting with '-')", clip.String(key, 64))
	}
	v := bytes.TrimSpace([]byte(value))
	switch {
	case string(v) == "true" || string(v) == "false":
		f.Kind, f.Bool = ParamBool, string(v) == "true"
		return f, nil
	case string(v) == "null":
		f.Kind = ParamNull
		return f, nil
	case len(v) > 0 && (v[0] == '{' || v[0] == '['):
		return f, fmt.Errorf("compares scalars only: give a number, a string, true, false or null")
	case len(v) > 0 && v[0] == '"' && json.Valid(v):
		f.Kind = ParamString
		_ = json.Unmarshal(v, &f.Str)
		return f, nil
	case len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Valid(v):
		n, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(n, 0) {
			return f, fmt.Errorf("number %s is out of range", clip.String(string(v), 40))
		}
		f.Kind, f.Num = ParamNumber, n
		return f, nil
	}
	if !utf8.ValidString(value) {
		return f, fmt.Errorf("must be UTF-8")
	}
	f.Kind, f.Str = ParamString, value
	return f, nil
}
