package fsstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"computerd/core"
	"computerd/fsstore"
)

// chunkRef names content as a one-chunk file by its hash, as a caller
// naming a chunk it claims to hold would.
func chunkRef(content string) *core.Content {
	return &core.Content{Size: int64(len(content)), Chunks: []core.ChunkRef{{Hash: sha256.Sum256([]byte(content)), Len: len(content)}}}
}

// confinedCreate commits, as a tenant's request would, a file at p whose
// content is c, named by hash.
func confinedCreate(s *fsstore.Store, ws int64, p string, c *core.Content, sent *fsstore.Uploader) error {
	var b core.Batch
	b.Add(core.Op{Kind: core.OpCreate, Path: p, Mode: 0o644, Content: c})
	_, err := s.Commit(context.Background(), ws, &b, fsstore.CommitInfo{Confine: true, Sent: sent})
	return err
}

func mustWrite(t *testing.T, s *fsstore.Store, ws int64, p, content string) {
	t.Helper()
	if _, err := s.Commit(context.Background(), ws, (&core.Batch{}).WriteFile(p, []byte(content), 0o644), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
}

func chunkCount(t *testing.T, s *fsstore.Store) int64 {
	t.Helper()
	st, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Chunks
}

// TestConfinedChunks: a confined commit (an API request, a sync push)
// names by hash only chunks it sent or its tenant reaches. Another
// tenant's chunk is refused exactly as a hash nobody stored, and nothing
// changes; the tenant's own chunks (in any retained revision of its
// workspaces, its forks' bases and its drafts), chunks sent with the
// request and chunks the batch's own writes stored all work, and what
// retention pruned no longer does; bytes stay stored once.
func TestConfinedChunks(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	alice, err := s.CreateWorkspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := s.CreateWorkspace(ctx, "bob", "w")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "PIN 4711"
	mustWrite(t, s, alice.ID, "secret.txt", secret)

	refused := func(name string, c *core.Content, sent *fsstore.Uploader) string {
		t.Helper()
		before, err := s.WorkspaceByID(ctx, bob.ID)
		if err != nil {
			t.Fatal(err)
		}
		err = confinedCreate(s, bob.ID, "got.txt", c, sent)
		if !errors.Is(err, core.ErrMissingChunk) {
			t.Fatalf("%s: %v, want ErrMissingChunk", name, err)
		}
		if after, _ := s.WorkspaceByID(ctx, bob.ID); after.Head != before.Head {
			t.Fatalf("%s: refused, yet bob's head moved from %d to %d", name, before.Head, after.Head)
		}
		return strings.ReplaceAll(err.Error(), c.Chunks[0].Hash.String(), "HASH")
	}
	// Alice's chunk and a hash nobody stored: the same refusal.
	other := refused("alice's chunk", chunkRef(secret), nil)
	unknown := refused("an unknown hash", chunkRef("PIN 0000"), nil)
	if other != unknown {
		t.Fatalf("another tenant's chunk answers %q, an unknown one %q", other, unknown)
	}
	// A trusted (unconfined) commit still finds any chunk: the store's own
	// paths (exec commits, pulls, restores) name chunks they read themselves.
	var b core.Batch
	b.Add(core.Op{Kind: core.OpCreate, Path: "trusted.txt", Mode: 0o644, Content: chunkRef(secret)})
	if _, err := s.Commit(ctx, alice.ID, &b, fsstore.CommitInfo{}); err != nil {
		t.Fatalf("an unconfined commit of a stored chunk: %v", err)
	}

	// An Uploader that sent other bytes grants nothing else.
	up := s.NewUploader()
	defer up.Close()
	if err := up.PutChunk(ctx, sha256.Sum256([]byte("other")), []byte("other")); err != nil {
		t.Fatal(err)
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	refused("alice's chunk with other bytes sent", chunkRef(secret), up)

	// Sent with the request: the bytes are bob's too now, stored once.
	chunks := chunkCount(t, s)
	if err := up.PutChunk(ctx, sha256.Sum256([]byte(secret)), []byte(secret)); err != nil {
		t.Fatal(err)
	}
	if err := up.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := confinedCreate(s, bob.ID, "sent.txt", chunkRef(secret), up); err != nil {
		t.Fatalf("a chunk sent with the request: %v", err)
	}
	if got := readBack(t, s, bob.ID, "sent.txt"); got != secret {
		t.Fatalf("sent.txt reads %q", got)
	}
	if got := chunkCount(t, s); got != chunks {
		t.Fatalf("%d chunks after bob sent alice's bytes, want %d: dedup across tenants stays", got, chunks)
	}
	// From now on bob reaches it through his own workspace, without sending it.
	if err := confinedCreate(s, bob.ID, "again.txt", chunkRef(secret), nil); err != nil {
		t.Fatalf("a chunk bob's workspace holds: %v", err)
	}
	// Its length must still be right.
	wrong := chunkRef(secret)
	wrong.Chunks[0].Len--
	if err := confinedCreate(s, bob.ID, "short.txt", wrong, nil); !errors.Is(err, core.ErrInvalidArgument) {
		t.Fatalf("bob's chunk with a wrong length: %v, want ErrInvalidArgument", err)
	}

	// A batch's own write stores bytes that its later ops may name.
	var own core.Batch
	own.WriteFile("typed.txt", []byte("typed by bob"), 0o644)
	own.Add(core.Op{Kind: core.OpCreate, Path: "copy.txt", Mode: 0o644, Content: chunkRef("typed by bob")})
	if _, err := s.Commit(ctx, bob.ID, &own, fsstore.CommitInfo{Confine: true}); err != nil {
		t.Fatalf("naming the chunk an earlier op of the batch wrote: %v", err)
	}

	// A fork reaches what its base holds, and a workspace reaches what the
	// tenant's drafts hold.
	mustWrite(t, s, bob.ID, "base.txt", "in the base")
	fork, err := s.Fork(ctx, bob.ID, core.Head, "fork")
	if err != nil {
		t.Fatal(err)
	}
	if err := confinedCreate(s, fork.ID, "from-base.txt", chunkRef("in the base"), nil); err != nil {
		t.Fatalf("a fork naming its base's chunk: %v", err)
	}
	draft, err := s.CreateDraft(ctx, bob.ID, core.Head, "x1")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, draft.ID, "draft.txt", "draft only")
	if err := confinedCreate(s, bob.ID, "from-draft.txt", chunkRef("draft only"), nil); err != nil {
		t.Fatalf("naming a chunk of the tenant's draft: %v", err)
	}
	// ... and alice reaches none of bob's.
	if err := confinedCreate(s, alice.ID, "x.txt", chunkRef("draft only"), nil); !errors.Is(err, core.ErrMissingChunk) {
		t.Fatalf("alice naming bob's draft chunk: %v, want ErrMissingChunk", err)
	}

	// What retention pruned is out of reach again, though the bytes stay
	// stored for alice: refused like any other tenant's chunk.
	carol, err := s.CreateWorkspace(ctx, "carol", "w")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, carol.ID, "pin.txt", secret)
	if err := confinedCreate(s, carol.ID, "copy.txt", chunkRef(secret), nil); err != nil {
		t.Fatalf("carol naming a chunk of her head: %v", err)
	}
	if _, err := s.Commit(ctx, carol.ID, (&core.Batch{}).Add(core.Op{Kind: core.OpDeleteAll, Path: "pin.txt"}, core.Op{Kind: core.OpDeleteAll, Path: "copy.txt"}), fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	if err := confinedCreate(s, carol.ID, "old.txt", chunkRef(secret), nil); err != nil {
		t.Fatalf("carol naming a chunk of a retained older revision: %v", err)
	}
	mustWrite(t, s, carol.ID, "old.txt", "overwritten")
	if _, err := s.Prune(ctx, carol.ID, fsstore.Policy{KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	if err := confinedCreate(s, carol.ID, "again.txt", chunkRef(secret), nil); !errors.Is(err, core.ErrMissingChunk) {
		t.Fatalf("carol naming a chunk only pruned revisions held: %v, want ErrMissingChunk", err)
	}

	// A push that conflicts is kept in a copy: confined there too.
	mustWrite(t, s, bob.ID, "c.txt", "head")
	cs := &core.Changeset{From: 1, Ops: []core.Op{{Kind: core.OpCreate, Path: "c.txt", Mode: 0o644, Content: chunkRef(secret + "!")}}}
	mustWrite(t, s, alice.ID, "bang.txt", secret+"!")
	if _, err := s.ApplyOrKeep(ctx, bob.ID, cs, fsstore.CommitInfo{Confine: true, Base: 1, ExecID: "p1"}, "w.conflict-p1"); !errors.Is(err, core.ErrMissingChunk) {
		t.Fatalf("a conflicting push naming alice's chunk: %v, want ErrMissingChunk", err)
	}
	if ws, _ := s.Workspaces(ctx, "bob"); len(ws) != 2 {
		t.Fatalf("bob has %d workspaces after a refused push, want 2 (no conflict copy): %v", len(ws), ws)
	}
}
