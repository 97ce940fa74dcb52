package overlay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"computerd/core"
)

// A Shelf keeps the overlays of execs that wrote nothing mounted, one per
// workspace, for the next exec on the same revision. A fresh overlay
// knows nothing of the tree beneath it: every path a command touches is
// looked up again through overlayfs and its inode made again, which makes
// the first pass over a tree 1.2-1.4x the later ones even with every
// page of the revision view cached. An exec that takes a shelved overlay
// starts where the previous one left off.
//
// Only an overlay nothing has touched is shelved: the command was reaped
// (no process of its container holds the mount), its commit found no
// change, and its upper directory is empty, its times as the mount left
// them (a file made and removed again moves them). So the next exec sees
// exactly its base revision, as in a fresh overlay. The shelf gives a
// layer back only for the same workspace, revision, mounts and write
// bound; any other exec of that workspace unmounts the shelved layer
// first, so that the view's live tree (which the layer holds at its
// revision) can move on.
//
// A shelved layer keeps its draft and its record, so a crash while it is
// shelved leaves what Recover expects: an upper layer with nothing in it.
type Shelf struct {
	max  int
	idle time.Duration
	log  *slog.Logger

	wg sync.WaitGroup // unmounts under way (drop)

	mu     sync.Mutex
	closed bool
	layers map[int64]*shelved // by workspace
	seq    uint64             // order of Put, for eviction
	gauge  func(n int)        // told the count whenever it changes
}

type shelved struct {
	l     *Layer
	seq   uint64
	timer *time.Timer
}

// NewShelf returns a shelf that keeps at most max layers, each for at most
// idle (then it is unmounted). Errors of unmounting go to log.
func NewShelf(max int, idle time.Duration, log *slog.Logger) *Shelf {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Shelf{max: max, idle: idle, log: log, layers: map[int64]*shelved{}}
}

// Report has report called with the number of shelved layers whenever it
// changes (for a gauge), under the shelf's lock.
func (s *Shelf) Report(report func(n int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gauge = report
	report(len(s.layers))
}

// changed reports the count; s.mu is held.
func (s *Shelf) changed() {
	if s.gauge != nil {
		s.gauge(len(s.layers))
	}
}

// remove takes workspace ws's entry off the shelf and returns its layer
// (nil if none), for the caller to drop or hand out; s.mu is held and
// the caller reports the count (changed).
func (s *Shelf) remove(ws int64) *Layer {
	e := s.layers[ws]
	if e == nil {
		return nil
	}
	e.timer.Stop()
	delete(s.layers, ws)
	return e.l
}

// Put shelves l, an exec's layer whose command has ended and been reaped
// and whose changes Commit has dealt with, and reports whether it did. If
// it did not, the caller unmounts l as usual.
func (s *Shelf) Put(l *Layer) bool {
	if s == nil || s.max <= 0 || !l.untouched() {
		return false
	}
	var evict []*Layer
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	ws := l.ws.ID
	if old := s.layers[ws]; old != nil {
		if old.l.base >= l.base {
			s.mu.Unlock()
			return false // the shelf has that revision (or a later one) already
		}
		evict = append(evict, s.remove(ws))
	}
	s.seq++
	e := &shelved{l: l, seq: s.seq}
	e.timer = time.AfterFunc(s.idle, func() { s.expire(ws, e) })
	s.layers[ws] = e
	for len(s.layers) > s.max {
		var oldest int64
		for id, x := range s.layers {
			if oldest == 0 || x.seq < s.layers[oldest].seq {
				oldest = id
			}
		}
		evict = append(evict, s.remove(oldest))
	}
	s.changed()
	s.mu.Unlock()
	for _, old := range evict {
		s.drop(old)
	}
	return true
}

// take hands out the layer shelved for workspace ws if it fits an exec
// with opt on revision base; a layer of ws that does not fit is unmounted.
func (s *Shelf) take(ws, base int64, opt Options) *Layer {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	l := s.remove(ws)
	s.changed()
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	if l.base == base && l.opt.Mounts == opt.Mounts && l.opt.UpperSize == opt.UpperSize &&
		l.opt.Pool == opt.Pool && l.opt.Volumes == opt.Volumes {
		return l
	}
	s.drop(l)
	return nil
}

// Moved drops the layer shelved for workspace ws if it is of a revision
// before rev, the workspace's new head: no exec will ask for it now, and
// dropping it at once, rather than when the next exec comes, keeps its
// teardown off that exec's path. It does not block.
func (s *Shelf) Moved(ws, rev int64) { s.dropIf(ws, func(l *Layer) bool { return l.base < rev }) }

// Forget drops the layer shelved for workspace ws, which was deleted. It
// does not block.
func (s *Shelf) Forget(ws int64) { s.dropIf(ws, func(*Layer) bool { return true }) }

// dropIf drops the layer shelved for workspace ws if drop says so.
func (s *Shelf) dropIf(ws int64, drop func(*Layer) bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	e := s.layers[ws]
	if e == nil || !drop(e.l) {
		s.mu.Unlock()
		return
	}
	s.remove(ws)
	s.changed()
	s.mu.Unlock()
	s.drop(e.l)
}

// expire unmounts a layer left on the shelf for the idle time.
func (s *Shelf) expire(ws int64, e *shelved) {
	s.mu.Lock()
	if s.layers[ws] != e {
		s.mu.Unlock()
		return // taken or evicted meanwhile
	}
	s.remove(ws)
	s.changed()
	s.mu.Unlock()
	s.drop(e.l)
}

// drop takes a layer off the shelf for good: it lets the view's tree go
// at once (so that the exec that dropped it can have the tree moved) and
// unmounts it in the background. Tearing down an overlay whose caches
// hold a whole tree takes tens of milliseconds, which an exec need not
// wait for.
func (s *Shelf) drop(l *Layer) {
	l.release()
	s.wg.Go(func() { s.unmount(l) })
}

func (s *Shelf) unmount(l *Layer) {
	if err := l.Unmount(context.Background()); err != nil {
		s.log.Warn("unmount a shelved exec layer", "dir", l.opt.Dir, "err", err)
	}
}

// Len is how many layers the shelf holds.
func (s *Shelf) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.layers)
}

// Close unmounts every shelved layer and waits for those dropped before;
// Put refuses from then on.
func (s *Shelf) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.closed = true
	var ls []*Layer
	for id := range s.layers {
		ls = append(ls, s.remove(id))
	}
	s.changed()
	s.mu.Unlock()
	var errs []error
	for _, l := range ls {
		if err := l.Unmount(context.Background()); err != nil {
			errs = append(errs, err)
		}
	}
	s.wg.Wait() // the layers dropped before
	return errors.Join(errs...)
}

// untouched reports whether nothing of l has changed since it was
// mounted: committed, and an upper directory that is empty with the times
// the mount left it (whose commit therefore found no change).
func (l *Layer) untouched() bool {
	l.mu.Lock()
	ok := l.committed && l.result == nil && !l.keptDraft
	l.mu.Unlock()
	if !ok {
		return false
	}
	var st unix.Stat_t
	if unix.Lstat(upperDir(l.opt.Dir), &st) != nil || st.Mtim != l.upperMtime || st.Ctim != l.upperCtime {
		return false
	}
	f, err := os.Open(upperDir(l.opt.Dir))
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err == io.EOF
}

// stampUpper notes the upper directory's times once the overlay is
// mounted, for untouched.
func (l *Layer) stampUpper() error {
	var st unix.Stat_t
	if err := unix.Lstat(upperDir(l.opt.Dir), &st); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	l.upperMtime, l.upperCtime = st.Mtim, st.Ctim
	return nil
}

// reuse makes a shelved layer exec opt's: a new draft under the exec's
// label, recorded before the previous exec's draft goes, so that a crash
// at any point leaves Recover a record whose draft exists.
func (l *Layer) reuse(ctx context.Context, ws core.Workspace, opt Options, label string) error {
	l.ws = ws // as it is now (its name may have changed)
	draft, err := opt.Store.CreateDraft(ctx, l.ws.ID, l.base, label)
	if err != nil {
		return fmt.Errorf("overlay: draft of %s: %w", l.ws.Name, err)
	}
	rec := record{Workspace: l.ws.ID, Base: l.base, Draft: draft.ID, Label: label}
	if err := writeRecord(filepath.Join(l.opt.Dir, recordName), rec); err != nil {
		opt.Store.DeleteWorkspace(context.WithoutCancel(ctx), draft.ID)
		return err
	}
	old := l.draft
	opt.Dir = l.opt.Dir
	l.mu.Lock()
	l.opt, l.draft, l.target = opt, draft, draft.ID
	l.committed, l.result, l.keptDraft = false, nil, false
	l.reused = true
	l.mu.Unlock()
	// Empty: a crash before this leaves it to RecoverDrafts, which deletes it.
	opt.Store.DeleteWorkspace(context.WithoutCancel(ctx), old.ID)
	return nil
}

// Reused reports whether the layer came off a Shelf rather than being
// mounted for its exec.
func (l *Layer) Reused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reused
}
