package fsstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// openLeaseStore opens a store whose timed leases run out at once, so that
// only an Uploader's holds (or committed rows) keep chunks from GC.
func openLeaseStore(t *testing.T) *fsstore.Store {
	t.Helper()
	s := fsstore.New(t.TempDir())
	s.ChunkSize = 16
	s.LeaseTime = time.Nanosecond
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func commitContent(t *testing.T, s *fsstore.Store, ws int64, p string, c *core.Content) error {
	t.Helper()
	var b core.Batch
	b.Add(core.Op{Kind: core.OpCreate, Path: p, Mode: 0o644, Content: c})
	_, err := s.Commit(context.Background(), ws, &b, fsstore.CommitInfo{})
	return err
}

func readBack(t *testing.T, s *fsstore.Store, ws int64, p string) string {
	t.Helper()
	ctx := context.Background()
	sn, err := s.Snapshot(ctx, ws, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	f, err := sn.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := f.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestLeaseUploadRacesGC: chunks an open Uploader wrote survive GC however
// long the commit takes; the commit then succeeds and reads back; closed
// without a commit, they go.
func TestLeaseUploadRacesGC(t *testing.T) {
	ctx := context.Background()
	s := openLeaseStore(t)
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("the bytes of an upload in flight. ", 20)
	up := s.NewUploader()
	c, err := up.Put(ctx, strings.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // the timed leases are over
	if st, err := s.GC(ctx); err != nil || st.Chunks != 0 {
		t.Fatalf("GC during the upload: %+v, %v; want nothing collected", st, err)
	}
	if err := commitContent(t, s, w.ID, "f", c); err != nil {
		t.Fatalf("commit after GC: %v", err)
	}
	if err := up.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, s, w.ID, "f"); got != data {
		t.Fatalf("read back %q, want %q", got, data)
	}
	if st, err := s.GC(ctx); err != nil || st.Chunks != 0 {
		t.Fatalf("GC after the commit: %+v, %v; want nothing collected", st, err)
	}

	abandoned := s.NewUploader()
	if _, err := abandoned.Put(ctx, strings.NewReader(strings.Repeat("never committed! ", 8))); err != nil {
		t.Fatal(err)
	}
	if err := abandoned.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := abandoned.Put(ctx, strings.NewReader("x")); err == nil {
		t.Error("Put after Close succeeded, want an error")
	}
}

// TestLeaseAbandonedUpload: an Uploader closed without a commit leaves its
// chunks to GC.
func TestLeaseAbandonedUpload(t *testing.T) {
	ctx := context.Background()
	s := openLeaseStore(t)
	up := s.NewUploader()
	if _, err := up.Put(ctx, strings.NewReader(strings.Repeat("abandoned bytes. ", 8))); err != nil {
		t.Fatal(err)
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := up.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	if st, err := s.GC(ctx); err != nil || st.Chunks == 0 {
		t.Fatalf("GC after an abandoned upload: %+v, %v; want its chunks collected", st, err)
	}
}

// TestLeaseSharedContent: two uploads of the same bytes share chunks; the
// first commits, its workspace is deleted and GC runs before the second
// commits. The second's lease is its own, so its commit still succeeds.
func TestLeaseSharedContent(t *testing.T) {
	ctx := context.Background()
	s := fsstore.New(t.TempDir()) // default LeaseTime: the timed lease would last, but a commit ends it
	s.ChunkSize = 16
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.CreateWorkspace(ctx, "alice", "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateWorkspace(ctx, "alice", "b")
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("the same bytes, twice. ", 10)
	put := func() (*fsstore.Uploader, *core.Content) {
		up := s.NewUploader()
		c, err := up.Put(ctx, strings.NewReader(data))
		if err == nil {
			err = up.Flush(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return up, c
	}
	upA, ca := put()
	upB, cb := put()
	if err := commitContent(t, s, a.ID, "f", ca); err != nil {
		t.Fatal(err)
	}
	upA.Close()
	if err := s.DeleteWorkspace(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if st, err := s.GC(ctx); err != nil || st.Chunks != 0 {
		t.Fatalf("GC while b's upload holds the chunks: %+v, %v; want nothing collected", st, err)
	}
	if err := commitContent(t, s, b.ID, "f", cb); err != nil {
		t.Fatalf("second commit of shared content after GC: %v", err)
	}
	upB.Close()
	if got := readBack(t, s, b.ID, "f"); got != data {
		t.Fatalf("read back %q, want %q", got, data)
	}
}

// TestLeaseImportRacesGC: an import's chunks survive GC until its commit,
// even once Store.LeaseTime is over. The file is over an upload batch, so
// its first batch is written in the background while the import goes on.
func TestLeaseImportRacesGC(t *testing.T) {
	ctx := context.Background()
	s := fsstore.New(t.TempDir()) // the default chunk size
	s.LeaseTime = time.Nanosecond
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	im, err := s.NewImport(ctx, w.ID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var data strings.Builder
	for i := 0; data.Len() < 9<<20; i++ {
		fmt.Fprintf(&data, "line %d of an attach that takes its time\n", i)
	}
	if err := im.File(ctx, "big.txt", 0o644, time.Now(), strings.NewReader(data.String())); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the first batch is written by now
	if st, err := s.GC(ctx); err != nil || st.Chunks != 0 {
		t.Fatalf("GC during the import: %+v, %v; want nothing collected", st, err)
	}
	if _, err := im.Commit(ctx, fsstore.CommitInfo{}); err != nil {
		t.Fatalf("import commit after GC: %v", err)
	}
	if got := readBack(t, s, w.ID, "big.txt"); got != data.String() {
		t.Fatalf("read back %d bytes, want %d", len(got), data.Len())
	}
}

// TestLeaseDraftSurvivesRetention: a draft's chunks are its rows', and
// Retain leaves drafts whole, so the harshest policy and GC keep its
// changes readable and deliverable.
func TestLeaseDraftSurvivesRetention(t *testing.T) {
	ctx := context.Background()
	s := openLeaseStore(t)
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.CreateDraft(ctx, w.ID, core.Head, "exec-1")
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("an exec's checkpointed write. ", 6)
	var b core.Batch
	b.WriteFile("out.txt", []byte(data), 0o644)
	if _, err := s.Commit(ctx, d.ID, &b, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	var b2 core.Batch
	b2.WriteFile("out.txt", []byte("overwritten later"), 0o644)
	if _, err := s.Commit(ctx, d.ID, &b2, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	if _, err := s.Retain(ctx, fsstore.Policy{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	sn, err := s.Snapshot(ctx, d.ID, 2)
	if err != nil {
		t.Fatalf("draft revision 2 after Retain: %v", err)
	}
	f, err := sn.Open(ctx, "out.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	if _, err := f.WriteTo(&got); err != nil || got.String() != data {
		t.Fatalf("draft revision 2 reads %q, %v; want %q", got.String(), err, data)
	}
	if _, err := s.Diff(ctx, d.ID, 1, 3); err != nil {
		t.Errorf("draft diff after Retain: %v", err)
	}
}

// TestLeaseHasChunks: chunks an Uploader found present are held like its
// own, so a commit naming them by hash survives a GC in between.
func TestLeaseHasChunks(t *testing.T) {
	ctx := context.Background()
	s := openLeaseStore(t)
	w, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	data := strings.Repeat("present but named by no row. ", 4)
	first := s.NewUploader()
	c, err := first.Put(ctx, strings.NewReader(data))
	if err == nil {
		err = first.Flush(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	hashes := make([]core.Hash, len(c.Chunks))
	for i, ref := range c.Chunks {
		hashes[i] = ref.Hash
	}
	up := s.NewUploader()
	have, err := up.HasChunks(ctx, hashes)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range have {
		if !ok {
			t.Fatalf("chunk %d not found", i)
		}
	}
	first.Close() // the writer gives up; the second holder remains
	time.Sleep(time.Millisecond)
	if st, err := s.GC(ctx); err != nil || st.Chunks != 0 {
		t.Fatalf("GC: %+v, %v; want nothing collected", st, err)
	}
	for i := range c.Chunks {
		c.Chunks[i].Row = 0
	}
	if err := commitContent(t, s, w.ID, "f", c); err != nil {
		t.Fatalf("commit of chunks found present: %v", err)
	}
	up.Close()
	if got := readBack(t, s, w.ID, "f"); got != data {
		t.Fatalf("read back %q", got)
	}
	if _, err := up.HasChunks(ctx, hashes); err == nil {
		t.Error("HasChunks after Close succeeded, want an error")
	}
}
