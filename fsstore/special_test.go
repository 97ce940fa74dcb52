package fsstore_test

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// specials is one of each special file type, as a batch makes them.
var specials = []core.Op{
	{Kind: core.OpMknod, Path: "d/fifo", Mode: fs.ModeNamedPipe | 0o640},
	{Kind: core.OpMknod, Path: "d/sock", Mode: fs.ModeSocket | 0o755},
	{Kind: core.OpMknod, Path: "d/null", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666, Rdev: core.MakeDev(1, 3)},
	{Kind: core.OpMknod, Path: "d/loop", Mode: fs.ModeDevice | 0o600, Rdev: core.MakeDev(7, 0)},
	{Kind: core.OpMknod, Path: "d/big", Mode: fs.ModeDevice | fs.ModeCharDevice, Rdev: core.MakeDev(4095, 1<<20-1)},
}

// specialStats describes the special files of ws at rev: path -> mode and device.
func specialStats(t *testing.T, s *fsstore.Store, ws, rev int64) map[string][2]uint64 {
	t.Helper()
	ctx := context.Background()
	sn, err := s.Snapshot(ctx, ws, rev)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]uint64{}
	err = sn.Walk(ctx, "", func(p string, st core.Stat) error {
		if core.IsSpecial(st.Mode) {
			out[p] = [2]uint64{uint64(st.Mode), st.Rdev}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSpecialFiles(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano()
	b := (&core.Batch{}).Mkdir("d", 0o755)
	for _, op := range specials {
		op.Mtime = mtime
		b.Add(op)
	}
	rev, err := s.Commit(ctx, w.ID, b, fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]uint64{}
	for _, op := range specials {
		want[op.Path] = [2]uint64{uint64(op.Mode), op.Rdev}
	}
	if got := specialStats(t, s, w.ID, rev.Rev); !reflect.DeepEqual(got, want) {
		t.Fatalf("special files:\n%v\nwant\n%v", got, want)
	}
	sn, _ := s.Snapshot(ctx, w.ID, rev.Rev)
	st, err := sn.Stat(ctx, "d/null")
	if err != nil || st.Mtime.UnixNano() != mtime || st.Size != 0 || st.Nlink != 1 {
		t.Fatalf("stat d/null: %+v %v", st, err)
	}
	if core.DevMajor(st.Rdev) != 1 || core.DevMinor(st.Rdev) != 3 {
		t.Fatalf("d/null is %d:%d", core.DevMajor(st.Rdev), core.DevMinor(st.Rdev))
	}
	es, err := sn.ReadDir(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Type != fs.FileMode(want["d/"+e.Name][0])&fs.ModeType {
			t.Errorf("entry %s: type %v, want %v", e.Name, e.Type, fs.FileMode(want["d/"+e.Name][0])&fs.ModeType)
		}
	}
	if _, err := sn.Open(ctx, "d/fifo"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("open of a FIFO's contents: %v", err)
	}

	// A diff makes them with mknod; applied to an empty workspace, it
	// rebuilds them; a fork and a restore keep them.
	cs, err := s.Diff(ctx, w.ID, 1, rev.Rev)
	if err != nil {
		t.Fatal(err)
	}
	var mknods int
	for _, op := range cs.Ops {
		if op.Kind == core.OpMknod {
			mknods++
			if op.Mtime != mtime {
				t.Errorf("diff: %v lost its mtime", op)
			}
		}
	}
	if mknods != len(specials) {
		t.Fatalf("diff has %d mknods, want %d: %v", mknods, len(specials), cs.Ops)
	}
	w2, _ := s.CreateWorkspace(ctx, "t", "w2")
	cs.From = w2.Head
	rev2, err := s.Apply(ctx, w2.ID, cs, fsstore.CommitInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if got := specialStats(t, s, w2.ID, rev2.Rev); !reflect.DeepEqual(got, want) {
		t.Fatalf("applied diff:\n%v\nwant\n%v", got, want)
	}
	// chmod keeps the type; delete and restore bring a device back.
	b = (&core.Batch{}).Add(core.Op{Kind: core.OpChmod, Path: "d/fifo", Mode: 0o600}, core.Op{Kind: core.OpDelete, Path: "d/null"})
	if _, err := s.Commit(ctx, w.ID, b, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	got := specialStats(t, s, w.ID, core.Head)
	if got["d/fifo"][0] != uint64(fs.ModeNamedPipe|0o600) {
		t.Fatalf("chmod of a FIFO: mode %v", fs.FileMode(got["d/fifo"][0]))
	}
	if _, ok := got["d/null"]; ok {
		t.Fatal("d/null not deleted")
	}
	if _, err := s.Restore(ctx, w.ID, rev.Rev, "", fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	if got := specialStats(t, s, w.ID, core.Head); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored:\n%v\nwant\n%v", got, want)
	}
	fork, err := s.Fork(ctx, w.ID, rev.Rev, "fork")
	if err != nil {
		t.Fatal(err)
	}
	if got := specialStats(t, s, fork.ID, core.Head); !reflect.DeepEqual(got, want) {
		t.Fatalf("fork:\n%v\nwant\n%v", got, want)
	}
	if rep, err := s.Check(ctx, fsstore.CheckOptions{AllRevisions: true}); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("check: %v %v", rep.Problems, err)
	}
}

func TestSpecialFilesBadInput(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []core.Op{
		{Kind: core.OpMknod, Path: "regular", Mode: 0o644},
		{Kind: core.OpMknod, Path: "dir", Mode: fs.ModeDir | 0o755},
		{Kind: core.OpMknod, Path: "link", Mode: fs.ModeSymlink | 0o777},
		{Kind: core.OpMknod, Path: "fifo", Mode: fs.ModeNamedPipe, Rdev: 1},
		{Kind: core.OpMknod, Path: "major", Mode: fs.ModeDevice, Rdev: core.MakeDev(4096, 0)},
		{Kind: core.OpMknod, Path: "minor", Mode: fs.ModeDevice, Rdev: core.MakeDev(0, 1<<20)},
		{Kind: core.OpMknod, Path: "bits", Mode: fs.ModeDevice, Rdev: 1 << 63},
	} {
		_, err := s.Commit(ctx, w.ID, (&core.Batch{}).Add(op), fsstore.CommitInfo{})
		if !errors.Is(err, core.ErrInvalidArgument) {
			t.Errorf("%v: %v, want invalid argument", op, err)
		}
	}
	// A name that is taken, and a write into a special file.
	b := (&core.Batch{}).Add(core.Op{Kind: core.OpMknod, Path: "p", Mode: fs.ModeNamedPipe | 0o644})
	if _, err := s.Commit(ctx, w.ID, b, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []core.Op{
		{Kind: core.OpMknod, Path: "p", Mode: fs.ModeSocket},
		{Kind: core.OpWrite, Path: "p", Data: []byte("x")},
		{Kind: core.OpCreate, Path: "p", Data: []byte("x")},
	} {
		if _, err := s.Commit(ctx, w.ID, (&core.Batch{}).Add(op), fsstore.CommitInfo{}); err == nil {
			t.Errorf("%v over a FIFO: no error", op)
		}
	}
	if head, _ := s.WorkspaceByID(ctx, w.ID); head.Head != w.Head+1 {
		t.Fatalf("refused ops moved the head to %d", head.Head)
	}
}
