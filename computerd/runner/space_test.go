package runner

import (
	"context"
	"errors"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// Execs that start together share the disk's free space: each one's
// volume is promised until it exists, so the sizes writeBound gives never
// add up to more than the free space beyond the reserve, and once the
// space is promised away the next exec is refused (no_space) rather than
// filling the disk the store writes to. A promise kept (unpromise) gives
// the space back.
func TestWriteBoundPromises(t *testing.T) {
	ctx := context.Background()
	st := fsstore.New(t.TempDir())
	if err := st.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &Runner{Store: st, Dir: t.TempDir()}
	r.defaults()
	r.MaxWrite = 1 << 50 // no ceiling: the disk decides
	free, total, err := st.DiskSpace()
	if err != nil {
		t.Fatal(err)
	}
	room := free - diskReserve(total)
	var sum int64
	var unpromises []func()
	for i := 0; ; i++ {
		size, unpromise, err := r.writeBound(ctx, "t")
		if errors.Is(err, core.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i > 200 {
			t.Fatalf("still promising after %d execs (%d bytes)", i, sum)
		}
		sum += size
		unpromises = append(unpromises, unpromise)
	}
	// Each takes at most half of what is left; the disk may have moved a
	// little meanwhile (other writers), so allow 1%.
	if sum > room+room/100 {
		t.Fatalf("promised %d bytes to %d execs with %d free beyond the reserve", sum, len(unpromises), room)
	}
	if len(unpromises) < 2 {
		t.Fatalf("only %d execs got room out of %d bytes", len(unpromises), room)
	}
	for _, u := range unpromises {
		u()
		u() // twice is once
	}
	if r.promised != 0 {
		t.Fatalf("%d bytes still promised after every promise was kept", r.promised)
	}
	if _, unpromise, err := r.writeBound(ctx, "t"); err != nil {
		t.Fatalf("after the promises were kept: %v", err)
	} else {
		unpromise()
	}
}
