package fsstore

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"
)

// Checkpoints off the writer's path. In WAL mode every page is written
// twice: appended to the WAL at commit, then copied into the database file
// by a checkpoint (with an fsync of each file). SQLite's automatic
// checkpoint runs inside the commit that crosses its threshold, on the
// writer's goroutine: a bulk import or a first pull, whose chunks go
// through the WAL at disk speed, spent a quarter of its writing time in
// those checkpoints, while nothing else could commit. So the writer
// connection has wal_autocheckpoint off, and a goroutine with a connection
// of its own runs passive checkpoints (which never block the writer or the
// readers) once about ckptEvery bytes have been committed since the last,
// and after ckptIdle without one if anything was committed. Should it fall
// behind (ckptBackstop), the writer checkpoints itself, as SQLite would.
// A checkpoint changes nothing about what a crash keeps: the WAL holds
// every committed transaction until it has been copied.
const (
	ckptEvery    = 16 << 20 // SQLite's default threshold: 1000 pages of 16 KiB
	ckptBackstop = 256 << 20
	ckptIdle     = 5 * time.Second
	// ckptRounds bounds how often a checkpoint copies again what was
	// committed while it ran; ckptFinishFrames is what it leaves to the
	// writer (see checkpoint).
	ckptRounds       = 4
	ckptFinishFrames = 16
	// txnPages estimates what a transaction appends beyond its chunk bytes:
	// the b-tree pages it touched.
	txnPages = 4 * 16 << 10
)

type checkpointer struct {
	db      *sql.DB
	kick    chan struct{}
	done    chan struct{}
	stopped chan struct{}
	pending atomic.Int64 // estimated bytes committed since the last checkpoint began
	finish  atomic.Bool  // the writer is to copy what the last checkpoint left (see checkpoint)
}

func startCheckpointer(db *sql.DB) *checkpointer {
	c := &checkpointer{db: db, kick: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go c.run()
	return c
}

func (c *checkpointer) run() {
	defer close(c.stopped)
	idle := time.NewTimer(ckptIdle)
	defer idle.Stop()
	for {
		select {
		case <-c.kick:
		case <-idle.C:
			if c.pending.Load() == 0 {
				idle.Reset(ckptIdle)
				continue
			}
		case <-c.done:
			return
		}
		// Commits made while this one runs count toward the next.
		c.pending.Store(0)
		c.checkpoint()
		idle.Reset(ckptIdle)
	}
}

// checkpoint copies the WAL into the database file. The WAL starts over
// (the next commit writes at its start, and the file grows no more) only
// when a write transaction begins with all of it copied; with commits
// following each other, each begins while the checkpointer copies what
// the one before committed, and the WAL grew for ever (by ~270 KiB a
// one-file commit: 470 MiB after 1,750 of them), every commit's fsync
// extending the file. So the checkpointer copies again what was
// committed while it ran, until a round finds little more, and then has
// the writer copy the rest before its next transaction (finishing): a
// few frames and one fsync of the database, once per ckptEvery. Errors
// (a busy database, a closing store) only mean the next one copies more.
func (c *checkpointer) checkpoint() {
	last := 0
	for range ckptRounds {
		var busy, frames, copied int
		if err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
			return
		}
		if frames-last <= ckptFinishFrames {
			break
		}
		last = frames
	}
	c.finish.Store(true)
}

// finishing reports, once, that the writer should copy what the last
// checkpoint left before its next transaction, so that it starts the WAL
// over.
func (c *checkpointer) finishing() bool { return c.finish.CompareAndSwap(true, false) }

// committed notes a committed transaction that appended about n bytes of
// content besides its pages. It reports whether the writer should
// checkpoint itself: the checkpointer has fallen far behind.
func (c *checkpointer) committed(n int64) bool {
	n += txnPages
	p := c.pending.Add(n)
	if p >= ckptEvery && p-n < ckptEvery {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	if p >= ckptBackstop {
		c.pending.Store(0)
		return true
	}
	return false
}

// stop ends the goroutine (before the store closes its connections).
func (c *checkpointer) stop() {
	close(c.done)
	<-c.stopped
}
