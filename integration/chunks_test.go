package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// oneChunk names content as a one-chunk file by its hash (the default
// chunk size is 256 KiB).
func oneChunk(h core.Hash, n int) *core.Content {
	return &core.Content{Size: int64(n), Chunks: []core.ChunkRef{{Hash: h, Len: n}}}
}

// rawPush sends a push stream made by hand, as an executor of the token's
// tenant would: the chunks given (hash -> bytes), then a changeset
// creating each path with the content named.
func rawPush(ctx context.Context, e *env, token, ws string, base int64, pushID string, sent [][]byte, files map[string]*core.Content) (syncproto.PushResult, error) {
	var buf bytes.Buffer
	enc := syncproto.NewEncoder(&buf)
	if err := enc.Header(syncproto.PushHeader{PushID: pushID, Base: base}); err != nil {
		return syncproto.PushResult{}, err
	}
	for _, data := range sent {
		if err := enc.Chunk(sha256.Sum256(data), data); err != nil {
			return syncproto.PushResult{}, err
		}
	}
	cs := &core.Changeset{From: base}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		cs.Ops = append(cs.Ops, core.Op{Kind: core.OpCreate, Path: p, Mode: 0o644, Content: files[p]})
	}
	if err := enc.Changeset(cs); err != nil {
		return syncproto.PushResult{}, err
	}
	if err := enc.Close(); err != nil {
		return syncproto.PushResult{}, err
	}
	c := &wire.Caller{BaseURL: e.d.URL(), Token: token, Header: http.Header{syncproto.HeaderVersion: {strconv.Itoa(syncproto.Version)}}}
	resp, err := c.Do(ctx, wire.Request{Method: "POST", Path: "/v1/sync/" + ws + "/push", Body: &buf})
	if err != nil {
		return syncproto.PushResult{}, err
	}
	defer resp.Body.Close()
	var res syncproto.PushResult
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

// wantRefused checks err is the answer to a chunk the caller may not name:
// 400 missing_chunk. It returns the message with the hash taken out.
func wantRefused(t *testing.T, what string, err error, h core.Hash) string {
	t.Helper()
	var we *wire.Error
	if !errors.As(err, &we) || we.Status != http.StatusBadRequest || we.Code != wire.CodeMissingChunk || !errors.Is(err, core.ErrMissingChunk) {
		t.Fatalf("%s: %v (%#v), want 400 %s", what, err, we, wire.CodeMissingChunk)
	}
	return strings.ReplaceAll(we.Message, h.String(), "HASH")
}

// TestChunksAreNoCapability: a chunk hash is no key to another tenant's
// bytes. Bob naming alice's chunk in an ops request or a sync push, without
// sending its bytes, is refused as a hash nobody stored is (same status,
// code, message, and time over many tries) and changes nothing; what bob
// holds himself, uploads, or sends in the push works; bytes stay stored
// once across tenants.
func TestChunksAreNoCapability(t *testing.T) {
	ctx := context.Background()
	e := start(t, api.Limits{})
	alice := client.New(e.d.URL(), e.token)
	bobToken := e.newToken("bob")
	bob := client.New(e.d.URL(), bobToken)
	if _, err := alice.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	const pin = "4711"
	if _, err := alice.Write(ctx, "w", "pin.txt", strings.NewReader(pin), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	pinHash := core.Hash(sha256.Sum256([]byte(pin)))
	// Many references to the chunk on alice's side: a check that looked
	// the chunk up store-wide first would take longer for it than for an
	// unknown hash.
	aw, err := e.d.Store.Workspace(ctx, "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	var many core.Batch
	many.Mkdir("copies", 0o755)
	for i := range 20000 {
		many.Add(core.Op{Kind: core.OpCreate, Path: fmt.Sprintf("copies/%d", i), Mode: 0o644, Content: oneChunk(pinHash, len(pin))})
	}
	if _, err := e.d.Store.Commit(ctx, aw.ID, &many, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	bobWS := func() core.Workspace {
		t.Helper()
		w, err := e.d.Store.Workspace(ctx, "bob", "w")
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	bobOps := func(p string, c *core.Content) error {
		_, err := bob.Ops(ctx, "w", wire.Ops{Ops: []core.Op{{Kind: core.OpCreate, Path: p, Mode: 0o644, Content: c}}})
		return err
	}
	randomHash := func() core.Hash {
		var h core.Hash
		rand.Read(h[:])
		return h
	}
	stats := func() fsstore.Stats {
		t.Helper()
		st, err := e.d.Store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// Ops: alice's chunk and a random hash get the same answer; nothing changes.
	before := bobWS().Head
	theirs := wantRefused(t, "bob's ops naming alice's chunk", bobOps("stolen.txt", oneChunk(pinHash, len(pin))), pinHash)
	r := randomHash()
	unknown := wantRefused(t, "bob's ops naming a random hash", bobOps("stolen.txt", oneChunk(r, len(pin))), r)
	if theirs != unknown {
		t.Fatalf("alice's chunk answers %q, a random hash %q", theirs, unknown)
	}
	if after := bobWS().Head; after != before {
		t.Fatalf("refused ops moved bob's head from %d to %d", before, after)
	}

	// ... in the same time: medians of interleaved tries within a factor.
	const tries = 150
	var tTheirs, tUnknown []time.Duration
	for range tries {
		start := time.Now()
		err := bobOps("stolen.txt", oneChunk(pinHash, len(pin)))
		tTheirs = append(tTheirs, time.Since(start))
		if !errors.Is(err, core.ErrMissingChunk) {
			t.Fatalf("try naming alice's chunk: %v", err)
		}
		r := randomHash()
		start = time.Now()
		err = bobOps("stolen.txt", oneChunk(r, len(pin)))
		tUnknown = append(tUnknown, time.Since(start))
		if !errors.Is(err, core.ErrMissingChunk) {
			t.Fatalf("try naming a random hash: %v", err)
		}
	}
	median := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	mt, mu := median(tTheirs), median(tUnknown)
	t.Logf("median answer over %d tries: alice's chunk %v, a random hash %v", tries, mt, mu)
	if ratio := float64(max(mt, mu)) / float64(min(mt, mu)); ratio > 2 {
		t.Fatalf("median answer: alice's chunk %v, a random hash %v (ratio %.2f): the time tells them apart", mt, mu, ratio)
	}

	// Uploading, then naming: bob's own chunk works by hash, bytes once.
	mine := "bob's own bytes"
	mineHash := core.Hash(sha256.Sum256([]byte(mine)))
	if _, err := bob.Write(ctx, "w", "mine.txt", strings.NewReader(mine), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := bobOps("mine-copy.txt", oneChunk(mineHash, len(mine))); err != nil {
		t.Fatalf("bob's ops naming a chunk he uploaded: %v", err)
	}
	if got := e.treeOf(e.d.Store, bobWS().ID)["mine-copy.txt"]; got != mine {
		t.Fatalf("mine-copy.txt reads %q", got)
	}

	// Push: naming alice's chunk without sending it is refused, and keeps
	// nothing (no revision, no conflict copy), like a random hash.
	before = bobWS().Head
	_, err = rawPush(ctx, e, bobToken, "w", before, "p-stolen", nil, map[string]*core.Content{"stolen.txt": oneChunk(pinHash, len(pin))})
	theirs = wantRefused(t, "bob's push naming alice's chunk", err, pinHash)
	r = randomHash()
	_, err = rawPush(ctx, e, bobToken, "w", before, "p-random", nil, map[string]*core.Content{"stolen.txt": oneChunk(r, len(pin))})
	if unknown = wantRefused(t, "bob's push naming a random hash", err, r); theirs != unknown {
		t.Fatalf("a push naming alice's chunk answers %q, a random hash %q", theirs, unknown)
	}
	// From an older base (the conflict path keeps a copy) too.
	_, err = rawPush(ctx, e, bobToken, "w", 1, "p-stolen-old", nil, map[string]*core.Content{"mine.txt": oneChunk(pinHash, len(pin))})
	wantRefused(t, "bob's conflicting push naming alice's chunk", err, pinHash)
	if after := bobWS().Head; after != before {
		t.Fatalf("refused pushes moved bob's head from %d to %d", before, after)
	}
	if wss, err := bob.Workspaces(ctx); err != nil || len(wss) != 1 {
		t.Fatalf("bob's workspaces after refused pushes: %v %v, want only w", wss, err)
	}

	// A push naming a chunk bob already holds, unsent, applies.
	res, err := rawPush(ctx, e, bobToken, "w", bobWS().Head, "p-mine", nil, map[string]*core.Content{"pushed-mine.txt": oneChunk(mineHash, len(mine))})
	if err != nil || res.Revision.Rev != bobWS().Head || len(res.Conflict) != 0 {
		t.Fatalf("bob's push naming his own chunk: %+v %v", res, err)
	}

	// A push that sends alice's bytes itself applies (bob knows them),
	// and the bytes stay stored once.
	chunks := stats().Chunks
	res, err = rawPush(ctx, e, bobToken, "w", bobWS().Head, "p-sent", [][]byte{[]byte(pin)}, map[string]*core.Content{"pin.txt": oneChunk(pinHash, len(pin))})
	if err != nil || res.Revision.Rev != bobWS().Head {
		t.Fatalf("bob's push sending the bytes it names: %+v %v", res, err)
	}
	if got := stats().Chunks; got != chunks {
		t.Fatalf("%d chunks after bob sent bytes alice has, want %d: dedup across tenants", got, chunks)
	}
	if got := e.treeOf(e.d.Store, bobWS().ID)["pin.txt"]; got != pin {
		t.Fatalf("bob's pin.txt reads %q", got)
	}
	// Now that bob's workspace holds it, his ops may name it.
	if err := bobOps("pin-copy.txt", oneChunk(pinHash, len(pin))); err != nil {
		t.Fatalf("bob's ops naming a chunk his push sent: %v", err)
	}

	// The executor's own push (syncproto.Mirror) sends what it names: unchanged.
	m := newMirror(t, e)
	m.Client.Token, m.Tenant = bobToken, "bob"
	st, err := m.Pull(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	after, err := m.Store.Commit(ctx, st.Local.ID, (&core.Batch{}).WriteFile("from-executor.txt", []byte("made on the executor\n"), 0o644), fsstore.CommitInfo{Source: core.SourceExec, Tenant: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.Store.Diff(ctx, st.Local.ID, st.Local.Head, after.Rev)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.Push(ctx, "w", st.Local.ID, cs, syncproto.PushHeader{PushID: "exec-1", Base: st.HomeRev}); err != nil || len(res.Conflict) != 0 {
		t.Fatalf("executor push: %+v %v", res, err)
	}
	rc, err := bob.Read(ctx, "w", "from-executor.txt", client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "made on the executor\n" {
		t.Fatalf("pushed file reads %q", got)
	}
}
