package core

import (
	"slices"
	"time"
	"unicode/utf8"
)

// HistoryEntry is one state change of a run (API.md "History"): the
// status it moved to, the attempt it concerns, when, why (the error or
// reason of the move), and for DISPATCHED and RUNNING the worker. Status
// is a run Status or HistoryPreempted.
type HistoryEntry struct {
	Status  string    `json:"status"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Reason  string    `json:"reason,omitempty"`
	Worker  string    `json:"worker,omitempty"`
}

// HistoryPreempted is the entry of an attempt stopped for a run of higher
// priority; the run is QUEUED again from it, with attempt + 1.
const HistoryPreempted = "PREEMPTED"

// Bounds of a run's history: a run preempted or lost without end keeps
// its first entry and its newest.
const (
	MaxHistory       = 100
	maxHistoryReason = 300
)

// record appends an entry for the move t just made. A zero at (Dispatch
// and Lose are given no time) is filled by the store with the write's
// time. The list is clipped first: copies of a Task share its backing
// array, and an append must never write into another copy's.
func (t *Task) record(status, reason string, at time.Time) {
	if len(reason) > maxHistoryReason {
		reason = reason[:maxHistoryReason]
		for !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	e := HistoryEntry{Status: status, Attempt: t.Attempt, At: at, Reason: reason}
	if status == string(StatusDispatched) || status == string(StatusRunning) {
		e.Worker = t.Worker
	}
	h := slices.Clip(t.History)
	if len(h) >= MaxHistory {
		h = append(h[:1:1], h[len(h)-MaxHistory+2:]...)
	}
	t.History = append(h, e)
}

// HistoryView is t's history as clients see it: with the QUEUED entry of
// its submission first, and for a run from before histories were kept (or
// ended by a write that records none) what its fields say.
func (t Task) HistoryView() []HistoryEntry {
	h := make([]HistoryEntry, 0, len(t.History)+3)
	if len(t.History) == 0 || t.History[0].Status != string(StatusQueued) || t.History[0].Attempt > 1 {
		h = append(h, HistoryEntry{Status: string(StatusQueued), Attempt: 1, At: t.CreatedAt})
	}
	if len(t.History) == 0 && t.StartedAt != nil {
		h = append(h, HistoryEntry{Status: string(StatusRunning), Attempt: t.Attempt, At: *t.StartedAt, Worker: t.Worker})
	}
	h = append(h, t.History...)
	if last := h[len(h)-1]; t.Status.Terminal() && last.Status != string(t.Status) {
		at := t.UpdatedAt
		if t.FinishedAt != nil {
			at = *t.FinishedAt
		}
		h = append(h, HistoryEntry{Status: string(t.Status), Attempt: t.Attempt, At: at, Reason: t.Error})
	}
	return h
}
