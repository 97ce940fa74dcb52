package fsstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"computerd/core"
)

// TestCheckpointer checks that the writer leaves checkpoints to the
// checkpointer, which copies the WAL into the database file once enough
// was committed, and that what was committed reads back.
func TestCheckpointer(t *testing.T) {
	ctx := context.Background()
	s := New(t.TempDir())
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := filepath.Join(s.Dir, "store.db")
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size(db)
	// 24 MiB of distinct chunks, over ckptEvery, in batches like an import's.
	up := s.NewUploader()
	chunk := make([]byte, s.chunkSize)
	var hashes []core.Hash
	for i := 0; i < 24<<20/int(s.chunkSize); i++ {
		binary.LittleEndian.PutUint64(chunk, uint64(i)+1)
		h := core.Hash(sha256.Sum256(chunk))
		hashes = append(hashes, h)
		if err := up.PutChunk(ctx, h, chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if wal := size(db + "-wal"); wal < 20<<20 {
		t.Fatalf("WAL is %d bytes after writing 24 MiB", wal)
	}
	// The commit that crossed ckptEvery kicked a checkpoint: well before
	// the idle one.
	wait := ckptIdle - time.Second
	deadline := time.Now().Add(wait)
	for size(db)-before < 12<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("database file grew by %d bytes in %v: no checkpoint", size(db)-before, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	have, err := s.HasChunks(ctx, hashes)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range have {
		if !ok {
			t.Fatalf("chunk %d missing", i)
		}
	}
}

// TestUploaderIdentify checks that Identify notes the row ids of the chunks
// PutChunk stored in a changeset's contents, leaves other chunks alone, and
// that committing the changeset uses them.
func TestUploaderIdentify(t *testing.T) {
	ctx := context.Background()
	s := New(t.TempDir())
	s.ChunkSize = 16
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := s.CreateWorkspace(ctx, "t", "ws")
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Put(ctx, strings.NewReader("an older chunk!!"))
	if err != nil {
		t.Fatal(err)
	}
	up := s.NewUploader()
	data := []string{"first chunk 0123", "second chunk 456", "third"}
	content := &core.Content{}
	for i, d := range data {
		h := core.Hash(sha256.Sum256([]byte(d)))
		if err := up.PutChunk(ctx, h, []byte(d)); err != nil {
			t.Fatal(err)
		}
		content.Chunks = append(content.Chunks, core.ChunkRef{Index: int64(i), Hash: h, Len: len(d)})
		content.Size += int64(len(d))
	}
	content.Size = 2*16 + int64(len(data[2]))
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	oldRef := core.ChunkRef{Index: 0, Hash: old.Chunks[0].Hash, Len: old.Chunks[0].Len}
	cs := &core.Changeset{Ops: []core.Op{
		{Kind: core.OpCreate, Path: "new", Mode: 0o644, Content: content},
		{Kind: core.OpCreate, Path: "old", Mode: 0o644, Content: &core.Content{Size: 16, Chunks: []core.ChunkRef{oldRef}}},
	}}
	up.Identify(cs)
	for i, ref := range content.Chunks {
		if ref.Row == 0 {
			t.Fatalf("chunk %d not identified", i)
		}
	}
	if id := cs.Ops[1].Content.Chunks[0].Row; id != 0 {
		t.Fatalf("a chunk the uploader did not store got id %d", id)
	}
	if _, err := s.Apply(ctx, w.ID, cs, CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	sn, err := s.Snapshot(ctx, w.ID, core.Head)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sn.ReadFile(ctx, "new")
	if err != nil || string(got) != data[0]+data[1]+data[2] {
		t.Fatalf("read %q %v", got, err)
	}
	if got, err := sn.ReadFile(ctx, "old"); err != nil || string(got) != "an older chunk!!" {
		t.Fatalf("read %q %v", got, err)
	}
}

// TestWALStartsOver commits one-file revisions back to back, with no gap
// in which a checkpoint could find the whole WAL copied before the next
// transaction began: the WAL must still start over, not grow by every
// commit's pages (1,000 commits wrote ~200 MiB of frames; the file grew
// to all of it before the writer finished the checkpointer's copies).
func TestWALStartsOver(t *testing.T) {
	ctx := context.Background()
	s := New(t.TempDir())
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := s.CreateWorkspace(ctx, "t", "w")
	if err != nil {
		t.Fatal(err)
	}
	const commits = 1000
	for i := range commits {
		op := core.Op{Kind: core.OpCreate, Path: "f" + strconv.Itoa(i), Data: []byte(strconv.Itoa(i))}
		if _, err := s.Commit(ctx, w.ID, &core.Batch{Ops: []core.Op{op}}, CommitInfo{Source: core.SourceAPI}); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(filepath.Join(s.Dir, "store.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(8 * ckptEvery); fi.Size() > limit {
		t.Errorf("after %d commits back to back the WAL holds %d MiB, want at most %d MiB: it never started over", commits, fi.Size()>>20, limit>>20)
	}
}
