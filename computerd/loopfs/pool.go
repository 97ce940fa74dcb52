package loopfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Pool keeps Count volumes of Size made and mounted in Dir ahead of need,
// so that taking one costs a rename: an exec's /workspace then mounts at
// once. It makes a new one after each Take, while Room allows.
type Pool struct {
	Maker *Maker
	Dir   string
	Size  int64
	Count int
	// Room, if set, says whether the disk can spare one more volume of
	// size: a pool must not take the last of it (each volume's blocks are
	// allocated).
	Room func(size int64) bool

	mu    sync.Mutex
	ready []string // volume directories, oldest first
	next  int      // the name of the next volume made
	wake  chan struct{}

	group  errgroup.Group
	cancel context.CancelFunc
}

// Open removes what a previous process left in Dir and starts making
// volumes.
func (p *Pool) Open(ctx context.Context) error {
	if err := p.clear(); err != nil {
		return err
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("loopfs: %w", err)
	}
	p.wake = make(chan struct{}, 1)
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.group.Go(func() error { p.fill(ctx); return nil })
	p.poke()
	return nil
}

// clear removes every volume in Dir.
func (p *Pool) clear() error {
	ents, err := os.ReadDir(p.Dir)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("loopfs: %w", err)
	}
	for _, e := range ents {
		if err := RemoveVolume(filepath.Join(p.Dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill makes volumes until there are Count, each time it is woken.
func (p *Pool) fill(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		for ctx.Err() == nil {
			p.mu.Lock()
			enough := len(p.ready) >= p.Count
			name := filepath.Join(p.Dir, strconv.Itoa(p.next))
			p.next++
			p.mu.Unlock()
			if enough || p.Room != nil && !p.Room(p.Size) {
				break
			}
			if err := p.Maker.MakeVolume(name, p.Size); err != nil {
				break // the next Take tries again
			}
			p.mu.Lock()
			p.ready = append(p.ready, name)
			p.mu.Unlock()
		}
	}
}

// Take moves a ready volume of size to dir (which must not exist) and
// reports whether there was one.
func (p *Pool) Take(dir string, size int64) bool {
	if p == nil || size != p.Size {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.poke()
	for len(p.ready) > 0 {
		v := p.ready[0]
		p.ready = p.ready[1:]
		if err := os.Rename(v, dir); err == nil {
			return true
		}
		RemoveVolume(v)
	}
	return false
}

// Put takes volume dir of size back, if the pool keeps volumes of that
// size and has fewer than Count ready, and reports whether it did. The
// caller has emptied its file system (what another exec wrote must not
// show). Reuse spares making a volume (10-30 ms) and removing one (its
// blocks given back, 10-30 ms for a few GiB), both paid by the disk and
// CPU every exec shares.
func (p *Pool) Put(dir string, size int64) bool {
	if p == nil || size != p.Size || p.cancel == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) >= p.Count {
		return false
	}
	name := filepath.Join(p.Dir, strconv.Itoa(p.next))
	p.next++
	if err := os.Rename(dir, name); err != nil {
		return false
	}
	p.ready = append(p.ready, name)
	return true
}

// Close stops making volumes and removes the ready ones.
func (p *Pool) Close() error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	p.group.Wait()
	p.mu.Lock()
	p.ready = nil
	p.mu.Unlock()
	return p.clear()
}
