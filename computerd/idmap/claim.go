package idmap

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultClaimDir is where the daemons of one host claim their ranges.
// It sits beside the containers' roots (/run/computerd/roots), on a
// file system that a reboot empties.
const DefaultClaimDir = "/run/computerd/idranges"

// lockName is the file in a claim directory whose lock makes looking
// at the claims and adding one a single step.
const lockName = ".lock"

// lockWait bounds the wait for another process's claim: it holds the
// directory's lock for a few milliseconds.
const lockWait = 10 * time.Second

// Holder is who holds a claim: what its file records.
type Holder struct {
	Range Range  `json:"range"`
	PID   int    `json:"pid"`
	Owner string `json:"owner"` // what the holder said it is: a daemon's data directory
}

// ClaimedError is the error of a claim refused: the range wanted, the
// live claim it overlaps, and the first range of the same size from
// DefaultBase on that overlaps no live claim (the zero Range if none).
type ClaimedError struct {
	Want   Range
	Holder Holder
	Free   Range
}

func (e *ClaimedError) Error() string {
	s := fmt.Sprintf("idmap: host ids %s overlap %s, held by %s (pid %d)", e.Want, e.Holder.Range, e.Holder.Owner, e.Holder.PID)
	if e.Free != (Range{}) {
		s += fmt.Sprintf("; %s is free", e.Free)
	}
	return s
}

func (e *ClaimedError) Unwrap() error { return ErrClaimed }

// Claim is a Range that one process holds for as long as it runs: a
// file in the claim directory, named by the range (BASE+SIZE), that
// records its holder and that the holder keeps locked (flock). The
// kernel drops the lock when the holder's descriptor closes, so a
// process that dies, however it dies, frees its claim; the next claim
// that meets the file removes it.
type Claim struct {
	Range Range
	path  string
	f     *os.File
}

// Claim claims r in dir (made if missing) for owner, or fails with a
// *ClaimedError if a live claim there overlaps it.
func (r Range) Claim(dir, owner string) (*Claim, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return claim(dir, owner, func(live []Holder) (Range, error) {
		for _, h := range live {
			if r.Overlaps(h.Range) {
				return Range{}, &ClaimedError{Want: r, Holder: h, Free: firstFree(live, r.Size)}
			}
		}
		return r, nil
	})
}

// ClaimFree claims in dir, for owner, the first range of DefaultSize ids
// from DefaultBase on, in steps of DefaultSize, that overlaps no live
// claim: the default range while no other daemon holds it.
func ClaimFree(dir, owner string) (*Claim, error) {
	return claim(dir, owner, func(live []Holder) (Range, error) {
		if r := firstFree(live, DefaultSize); r != (Range{}) {
			return r, nil
		}
		return Range{}, fmt.Errorf("%w: no range of %d ids from %d is free", ErrClaimed, DefaultSize, DefaultBase)
	})
}

// Path is the claim's file.
func (c *Claim) Path() string { return c.path }

// Close gives the range up.
func (c *Claim) Close() error {
	if c == nil || c.f == nil {
		return nil
	}
	err := os.Remove(c.path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	c.f = nil
	return err
}

// claim takes dir's lock, lists its live claims (removing dead ones'
// files), and claims the range pick chooses from them.
func claim(dir, owner string, pick func(live []Holder) (Range, error)) (*Claim, error) {
	fail := func(err error) (*Claim, error) { return nil, fmt.Errorf("idmap: claim in %s: %w", dir, err) }
	// The parent may be /run/computerd, which the containers' roots
	// beneath it need searchable by every id.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fail(err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return fail(err)
	}
	defer unlock()
	live, err := liveClaims(dir)
	if err != nil {
		return fail(err)
	}
	r, err := pick(live)
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, r.String())
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(err)
	}
	rec, _ := json.Marshal(Holder{Range: r, PID: os.Getpid(), Owner: owner})
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		os.Remove(p)
		return fail(err)
	}
	if _, err := f.Write(append(rec, '\n')); err != nil {
		f.Close()
		os.Remove(p)
		return fail(err)
	}
	return &Claim{Range: r, path: p, f: f}, nil
}

// lockDir takes the lock of claim directory dir, waiting up to lockWait.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(lockWait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// liveClaims lists the claims in dir whose holder still holds its lock,
// and removes the files of the others. Its caller holds dir's lock, so
// no claim is made meanwhile.
func liveClaims(dir string) ([]Holder, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var live []Holder
	for _, e := range ents {
		r, ok := parseRange(e.Name())
		if !ok {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // its holder gave it up
		} else if err != nil {
			return nil, err
		}
		switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err {
		case nil: // nobody holds it: its holder died
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				f.Close()
				return nil, err
			}
		case unix.EWOULDBLOCK:
			h := Holder{PID: -1, Owner: "an unknown process"}
			if b, err := os.ReadFile(p); err == nil {
				json.Unmarshal(b, &h)
			}
			h.Range = r // the name says what is claimed
			live = append(live, h)
		default:
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		f.Close()
	}
	return live, nil
}

// parseRange reads a claim's file name, BASE+SIZE.
func parseRange(name string) (Range, bool) {
	b, s, ok := strings.Cut(name, "+")
	if !ok {
		return Range{}, false
	}
	base, err1 := strconv.ParseUint(b, 10, 32)
	size, err2 := strconv.ParseUint(s, 10, 32)
	r := Range{Base: uint32(base), Size: uint32(size)}
	if err1 != nil || err2 != nil || r.Validate() != nil || r.String() != name {
		return Range{}, false
	}
	return r, true
}

// firstFree is the first range of size ids from DefaultBase on, in
// steps of size, that overlaps none of live; the zero Range if there is
// none below the largest id.
func firstFree(live []Holder, size uint32) Range {
	if size == 0 {
		return Range{}
	}
next:
	for base := uint64(DefaultBase); base+uint64(size) <= 1<<32-1; base += uint64(size) {
		r := Range{Base: uint32(base), Size: size}
		for _, h := range live {
			if r.Overlaps(h.Range) {
				continue next
			}
		}
		return r
	}
	return Range{}
}
