// Package sqlutil holds what every SQL backend of store.Store must encode the
// same way, so that SQLite and MySQL give identical answers to the
// conformance suite: list cursors, page limits, JSON columns, time columns,
// and the queries and methods both backends share (Shared). It opens no
// connection and keeps no state of its own: it runs on the connections a
// backend lends it, in the backend's dialect. Every function and method is
// safe for concurrent use. It must never hold SQL one backend needs and the
// other cannot run: what differs goes through the backend's Dialect.
package sqlutil

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// Page limits of ListTasks (API.md: limit ≤ 500).
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Limit turns a requested page size into the one to use: default when not
// positive, clamped to MaxLimit (a too-large limit is not worth a 400).
func Limit(n int) int {
	switch {
	case n <= 0:
		return DefaultLimit
	case n > MaxLimit:
		return MaxLimit
	}
	return n
}

// cursorVersion prefixes every cursor so a later format can be told apart.
const cursorVersion = "1"

// EncodeCursor returns the opaque cursor after the row (createdAt, id), where
// createdAt is in unix nanoseconds as stored.
func EncodeCursor(createdAt int64, id string) string {
	s := cursorVersion + ":" + strconv.FormatInt(createdAt, 10) + ":" + id
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// DecodeCursor is the inverse of EncodeCursor; any malformed input wraps
// store.ErrBadCursor.
func DecodeCursor(c string) (createdAt int64, id string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("cannot decode cursor: %w", store.ErrBadCursor)
	}
	parts := strings.SplitN(string(b), ":", 3)
	if len(parts) != 3 || parts[0] != cursorVersion || !core.ValidTaskID(parts[2]) {
		return 0, "", fmt.Errorf("cannot parse cursor: %w", store.ErrBadCursor)
	}
	createdAt, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("cannot parse cursor time: %w", store.ErrBadCursor)
	}
	return createdAt, parts[2], nil
}

// The instants a unix-nanosecond int64 can hold.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// Nanos returns t as unix nanoseconds. Times are stored as integers so that
// ordering by creation is exact and no backend rounds to micro- or
// milliseconds.
func Nanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("cannot store time %s: outside years 1678–2262", t)
	}
	return t.UnixNano(), nil
}

// NullNanos is Nanos for an optional time; nil and the zero time are NULL.
func NullNanos(t *time.Time) (*int64, error) {
	if t == nil || t.IsZero() {
		return nil, nil
	}
	n, err := Nanos(*t)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// Time is the inverse of Nanos, always in UTC.
func Time(n int64) time.Time { return time.Unix(0, n).UTC() }

// NullTime is the inverse of NullNanos.
func NullTime(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := Time(*n)
	return &t
}

// EncodeJSON marshals a slice or map column. nil is stored as empty (empty,
// "[]" or "{}"), so reads never have to tell nil from empty.
func EncodeJSON(v any, empty string) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("cannot encode JSON column: %w", err)
	}
	if string(b) == "null" {
		return empty, nil
	}
	return string(b), nil
}

// EncodeInts is EncodeJSON(v, "[]") for a list of ints, without
// reflection: every fenced update writes the run's GPU indices.
func EncodeInts(v []int) string {
	if len(v) == 0 {
		return "[]"
	}
	b := make([]byte, 0, 2+4*len(v))
	b = append(b, '[')
	for i, n := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return string(append(b, ']'))
}

// DecodeSlice reads a JSON array column; the result is never nil, so an
// empty list renders as [] in API JSON rather than null.
func DecodeSlice[T any](s string) ([]T, error) {
	out := []T{}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("cannot decode JSON column %q: %w", s, err)
	}
	if out == nil {
		out = []T{}
	}
	return out, nil
}

// DecodeMap reads a JSON object column; the result is never nil.
func DecodeMap(s string) (map[string]string, error) {
	out := map[string]string{}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("cannot decode JSON column %q: %w", s, err)
	}
	if out == nil {
		out = map[string]string{}
	}
	return out, nil
}

// EncodeParams compacts a run's params for storage. Empty and JSON null are
// stored as NULL (nil); invalid JSON is refused, since it would break every
// later rendering of the run.
func EncodeParams(raw json.RawMessage) (*string, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, fmt.Errorf("cannot store params: not valid JSON: %w", err)
	}
	s := buf.String()
	return &s, nil
}

// DecodeParams is the inverse of EncodeParams: NULL gives nil.
func DecodeParams(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

// CheckFinite refuses NaN and ±Inf: JSON cannot carry them and SQL backends
// turn NaN into NULL.
func CheckFinite(what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("cannot store %s: %v is not a finite number", what, v)
	}
	return nil
}

// Fence converts a fencing token to the signed 64-bit integer SQL stores.
func Fence(f uint64) (int64, error) {
	if f > math.MaxInt64 {
		return 0, fmt.Errorf("cannot store fence %d: above 2^63-1", f)
	}
	return int64(f), nil
}
