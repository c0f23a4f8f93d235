package artifactpipe

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// usageTTL is how long the pipe trusts the store's sums of the bytes users
// keep (ARTIFACT_MAX_MB_PER_USER, ARTIFACT_MAX_MB) before it reads them
// again: summing the index at every file would cost a scan each. Between
// reads it adds what it indexes itself, so only what other masters store
// meanwhile can pass a cap, by at most what they store in usageTTL.
const usageTTL = 10 * time.Second

// usage is what the pipe knows of the bytes kept per user and in all, for
// the caps. Shared by the shards, since a user's runs hash to several;
// its mutex is never held over a call to the store.
type usage struct {
	p     *Pipe
	mu    sync.Mutex
	users map[int64]*tally
	total tally
}

// tally is one sum: the store's at its last read, plus what this pipe
// indexed since, and the announced sizes of its uploads in progress.
type tally struct {
	stored, reserved int64
	read             time.Time // zero: never read
}

// over is a cap an upload would pass and where its owner stands.
type over struct {
	total     bool // ARTIFACT_MAX_MB, else ARTIFACT_MAX_MB_PER_USER
	at, limit int64
}

func (o *over) message(path, username string) string {
	if o.total {
		return fmt.Sprintf("artifact %s not stored: this server keeps %s of runs' outputs, its limit is %s (ARTIFACT_MAX_MB); ask an admin",
			path, humanBytes(o.at), humanBytes(o.limit))
	}
	return fmt.Sprintf("artifact %s not stored: user %s is at %s of %s (ARTIFACT_MAX_MB_PER_USER); ask an admin to raise it",
		path, username, humanBytes(o.at), humanBytes(o.limit))
}

func (u *usage) userCap() bool  { return u.p.cfg.MaxUserBytes > 0 }
func (u *usage) totalCap() bool { return u.p.cfg.MaxTotalBytes > 0 }

// tallyLocked is the sum of user (0: the total).
func (u *usage) tallyLocked(user int64) *tally {
	if user == 0 {
		return &u.total
	}
	t := u.users[user]
	if t == nil {
		t = &tally{}
		u.users[user] = t
	}
	return t
}

// refresh reads the store's sum of user (0: the total) when the pipe's is
// older than usageTTL.
func (u *usage) refresh(ctx context.Context, user int64) error {
	now := u.p.cfg.Clock()
	u.mu.Lock()
	t := u.tallyLocked(user)
	stale := t.read.IsZero() || now.Sub(t.read) >= usageTTL
	u.mu.Unlock()
	if !stale {
		return nil
	}
	n, err := u.p.cfg.Index.ArtifactBytes(ctx, user)
	if err != nil {
		return fmt.Errorf("cannot read what is kept: %w", err)
	}
	u.mu.Lock()
	t = u.tallyLocked(user) // forget may have dropped the one read above
	t.stored, t.read = n, now
	u.mu.Unlock()
	return nil
}

// reserve counts an upload of size, which replaces a row of replaced
// bytes, against the caps of its owner user and of the server, or returns
// the cap it would pass (and counts nothing).
func (u *usage) reserve(ctx context.Context, user, size, replaced int64) (*over, error) {
	if u.userCap() {
		if err := u.refresh(ctx, user); err != nil {
			return nil, err
		}
	}
	if u.totalCap() {
		if err := u.refresh(ctx, 0); err != nil {
			return nil, err
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.userCap() {
		if t := u.tallyLocked(user); t.stored+t.reserved-replaced+size > u.p.cfg.MaxUserBytes {
			return &over{at: t.stored + t.reserved, limit: u.p.cfg.MaxUserBytes}, nil
		}
	}
	if u.totalCap() {
		if t := &u.total; t.stored+t.reserved-replaced+size > u.p.cfg.MaxTotalBytes {
			return &over{total: true, at: t.stored + t.reserved, limit: u.p.cfg.MaxTotalBytes}, nil
		}
	}
	u.addLocked(user, size, 0)
	return nil, nil
}

// release lets go of an upload's reservation of size; stored is what
// indexing it added to what its owner keeps (0 when it was not indexed).
func (u *usage) release(user, size, stored int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.addLocked(user, -size, stored)
}

func (u *usage) addLocked(user, reserved, stored int64) {
	if u.userCap() {
		t := u.tallyLocked(user)
		t.reserved += reserved
		t.stored += stored
	}
	if u.totalCap() {
		u.total.reserved += reserved
		u.total.stored += stored
	}
}

// forget drops the sums of users with nothing in progress and not read
// for usageTTL (they are read again when needed).
func (u *usage) forget(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for id, t := range u.users {
		if t.reserved == 0 && now.Sub(t.read) >= usageTTL {
			delete(u.users, id)
		}
	}
}
