package fsstore_test

// A randomized model test: random batches of ops run against the store and
// against a plain in-memory model of a POSIX-like tree, and every revision,
// diff, fork, restore and prune is checked against the model.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

var (
	modelSeed  = flag.Int64("seed", 0, "TestModel: run only the sequence with this seed")
	modelSeeds = flag.Int("seeds", 0, "TestModel: number of random sequences (default 200, 20 with -short)")
)

func TestModel(t *testing.T) {
	n, revs := 200, 40
	if testing.Short() {
		n, revs = 20, 25
	}
	if *modelSeed != 0 {
		runModel(t, *modelSeed, revs)
		return
	}
	if *modelSeeds > 0 {
		n = *modelSeeds
	}
	t.Cleanup(func() {
		modelStats.Lock()
		defer modelStats.Unlock()
		var lines []string
		for _, k := range slices.Sorted(maps.Keys(modelStats.n)) {
			lines = append(lines, fmt.Sprintf("%7d %s", modelStats.n[k], k))
		}
		t.Logf("counts:\n%s", strings.Join(lines, "\n"))
	})
	base := time.Now().UnixNano() & (1<<40 - 1)
	t.Logf("base seed %d (reproduce one sequence with: go test ./fsstore -run TestModel -seed=N)", base)
	for i := range n {
		seed := base + int64(i) + 1
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, revs)
		})
	}
}

// modelStats counts what the sequences did, for -v.
var modelStats = struct {
	sync.Mutex
	n map[string]int
}{n: map[string]int{}}

func count(k string) {
	modelStats.Lock()
	modelStats.n[k]++
	modelStats.Unlock()
}

// ---------------------------------------------------------------------------
// The model.

type mkind int

const (
	mDir mkind = iota
	mFile
	mSymlink
)

func (k mkind) String() string { return [...]string{"dir", "file", "symlink"}[k] }

// mnode is one model inode.
type mnode struct {
	kind       mkind
	perm       fs.FileMode // permission and special bits
	uid, gid   uint32
	data       []byte // files; never modified in place once stored
	target     string // symlinks
	mtime      int64
	mtimeKnown bool           // mtime was set explicitly and not changed since
	kids       map[string]int // directories: name -> inode id
}

// mstate is one tree: inodes by id, the root being rootID.
type mstate struct {
	nodes map[int]*mnode
}

const rootID = 1

const permMask = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

func newState() *mstate {
	return &mstate{nodes: map[int]*mnode{rootID: {kind: mDir, perm: 0o755, kids: map[string]int{}}}}
}

// clone deep-copies the reachable part of the tree.
func (m *mstate) clone() *mstate {
	c := &mstate{nodes: make(map[int]*mnode, len(m.nodes))}
	var cp func(id int)
	cp = func(id int) {
		if _, ok := c.nodes[id]; ok {
			return
		}
		n := *m.nodes[id]
		c.nodes[id] = &n
		if n.kind == mDir {
			n.kids = maps.Clone(n.kids)
			for _, k := range n.kids {
				cp(k)
			}
		}
	}
	cp(rootID)
	return c
}

type ment struct {
	path string
	id   int
	n    *mnode
}

// entries lists every path of the tree (the root as ""), parents first, in lexical order.
func (m *mstate) entries() []ment {
	var out []ment
	var walk func(p string, id int)
	walk = func(p string, id int) {
		n := m.nodes[id]
		out = append(out, ment{p, id, n})
		if n.kind != mDir {
			return
		}
		for _, name := range slices.Sorted(maps.Keys(n.kids)) {
			walk(joinP(p, name), n.kids[name])
		}
	}
	walk("", rootID)
	return out
}

func joinP(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func splitP(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

func inSub(p, root string) bool {
	return root == "" || p == root || strings.HasPrefix(p, root+"/")
}

func depthP(p string) int {
	if p == "" {
		return 0
	}
	return strings.Count(p, "/") + 1
}

// cleanP cleans a path lexically like the store promises to; ok is false if
// it is invalid (climbs above the root or holds NUL).
func cleanP(p string) (string, bool) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", false
	}
	var parts []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", false
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), true
}

// resolve walks a clean path without following symlinks.
func (m *mstate) resolve(p string) (int, error) {
	id := rootID
	if p == "" {
		return id, nil
	}
	parts := strings.Split(p, "/")
	for i, c := range parts {
		k, ok := m.nodes[id].kids[c]
		if !ok {
			return 0, core.ErrNotFound
		}
		if i+1 < len(parts) && m.nodes[k].kind != mDir {
			return 0, core.ErrNotDir
		}
		id = k
	}
	return id, nil
}

func (m *mstate) parentOf(p string) (*mnode, string, error) {
	if p == "" {
		return nil, "", core.ErrInvalidArgument
	}
	dir, name := splitP(p)
	id, err := m.resolve(dir)
	if err != nil {
		return nil, "", err
	}
	if m.nodes[id].kind != mDir {
		return nil, "", core.ErrNotDir
	}
	return m.nodes[id], name, nil
}

// touch records that a directory's entries changed, which moves its mtime.
func touch(n *mnode) { n.mtimeKnown = false }

func defPerm(m fs.FileMode, def fs.FileMode) fs.FileMode {
	if m == 0 {
		return def
	}
	return m & permMask
}

// apply runs one op of a batch with POSIX semantics (symlinks never
// followed), returning the sentinel error the store must report.
func (m *mstate) apply(op core.Op, alloc func() int) error {
	// Validation the store does before running anything.
	var ok bool
	if op.Path, ok = cleanP(op.Path); !ok {
		return core.ErrInvalidPath
	}
	if op.Kind == core.OpRename || op.Kind == core.OpLink {
		if op.From, ok = cleanP(op.From); !ok {
			return core.ErrInvalidPath
		}
	}
	if op.Kind == core.OpSymlink && op.Target == "" {
		return core.ErrInvalidPath
	}
	if op.Kind == core.OpWrite && op.Offset < 0 || op.Kind == core.OpTruncate && op.Size < 0 {
		return core.ErrInvalidArgument
	}

	switch op.Kind {
	case core.OpMkdir:
		if op.Path == "" {
			return core.ErrExists
		}
		parent, name, err := m.parentOf(op.Path)
		if err != nil {
			return err
		}
		if _, ok := parent.kids[name]; ok {
			return core.ErrExists
		}
		id := alloc()
		m.nodes[id] = &mnode{kind: mDir, perm: defPerm(op.Mode, 0o755), kids: map[string]int{}}
		parent.kids[name] = id
		touch(parent)
	case core.OpCreate:
		parent, name, err := m.parentOf(op.Path)
		if err != nil {
			return err
		}
		if id, ok := parent.kids[name]; ok {
			n := m.nodes[id]
			switch n.kind {
			case mDir:
				return core.ErrIsDir
			case mSymlink:
				return core.ErrExists
			}
			n.data = bytes.Clone(op.Data)
			if op.Mode != 0 {
				n.perm = op.Mode & permMask
			}
			n.mtimeKnown = false
			if op.Mtime != 0 {
				n.mtime, n.mtimeKnown = op.Mtime, true
			}
			return nil
		}
		id := alloc()
		n := &mnode{kind: mFile, perm: defPerm(op.Mode, 0o644), data: bytes.Clone(op.Data)}
		if op.Mtime != 0 {
			n.mtime, n.mtimeKnown = op.Mtime, true
		}
		m.nodes[id] = n
		parent.kids[name] = id
		touch(parent)
	case core.OpWrite, core.OpTruncate:
		id, err := m.resolve(op.Path)
		if err != nil {
			return err
		}
		n := m.nodes[id]
		switch n.kind {
		case mDir:
			return core.ErrIsDir
		case mSymlink:
			return core.ErrInvalidArgument
		}
		if op.Kind == core.OpWrite {
			if len(op.Data) > 0 {
				buf := make([]byte, max(int64(len(n.data)), op.Offset+int64(len(op.Data))))
				copy(buf, n.data)
				copy(buf[op.Offset:], op.Data)
				n.data = buf
			}
		} else {
			buf := make([]byte, op.Size)
			copy(buf, n.data)
			n.data = buf
		}
		n.mtimeKnown = false
	case core.OpSymlink:
		parent, name, err := m.parentOf(op.Path)
		if err != nil {
			return err
		}
		if _, ok := parent.kids[name]; ok {
			return core.ErrExists
		}
		id := alloc()
		n := &mnode{kind: mSymlink, perm: 0o777, target: op.Target}
		if op.Mtime != 0 {
			n.mtime, n.mtimeKnown = op.Mtime, true
		}
		m.nodes[id] = n
		parent.kids[name] = id
		touch(parent)
	case core.OpLink:
		src, err := m.resolve(op.From)
		if err != nil {
			return err
		}
		if m.nodes[src].kind == mDir {
			return core.ErrIsDir
		}
		parent, name, err := m.parentOf(op.Path)
		if err != nil {
			return err
		}
		if _, ok := parent.kids[name]; ok {
			return core.ErrExists
		}
		parent.kids[name] = src
		touch(parent)
	case core.OpRename:
		return m.rename(op)
	case core.OpDelete:
		parent, name, err := m.parentOf(op.Path)
		if err != nil {
			return err
		}
		id, ok := parent.kids[name]
		if !ok {
			return core.ErrNotFound
		}
		if n := m.nodes[id]; n.kind == mDir && len(n.kids) > 0 {
			return core.ErrNotEmpty
		}
		delete(parent.kids, name)
		touch(parent)
	case core.OpDeleteAll:
		if _, err := m.resolve(op.Path); errors.Is(err, core.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		if op.Path == "" {
			root := m.nodes[rootID]
			if len(root.kids) > 0 {
				clear(root.kids)
				touch(root)
			}
			return nil
		}
		parent, name, _ := m.parentOf(op.Path)
		delete(parent.kids, name)
		touch(parent)
	case core.OpChmod, core.OpChown, core.OpUtimes:
		id, err := m.resolve(op.Path)
		if err != nil {
			return err
		}
		n := m.nodes[id]
		switch op.Kind {
		case core.OpChmod:
			n.perm = op.Mode & permMask
		case core.OpChown:
			n.uid, n.gid = op.UID, op.GID
		case core.OpUtimes:
			n.mtime, n.mtimeKnown = op.Mtime, true
		}
	default:
		panic("model: unknown op " + string(op.Kind))
	}
	return nil
}

// rename has rename(2) semantics, plus RENAME_NOREPLACE and RENAME_EXCHANGE
// as renameat2(2) defines them.
func (m *mstate) rename(op core.Op) error {
	from, to := op.From, op.Path
	if from == "" || to == "" {
		return core.ErrInvalidArgument
	}
	sp, sname, err := m.parentOf(from)
	if err != nil {
		return err
	}
	sid, ok := sp.kids[sname]
	if !ok {
		return core.ErrNotFound
	}
	dp, dname, err := m.parentOf(to)
	if err != nil {
		return err
	}
	src := m.nodes[sid]
	if src.kind == mDir && inSub(to, from) && to != from {
		return core.ErrInvalidArgument // into itself
	}
	did, exists := dp.kids[dname]
	if op.Exchange {
		if !exists {
			return core.ErrNotFound
		}
		if from == to {
			return nil // the same entry: nothing to swap
		}
		dst := m.nodes[did]
		if src.kind == mDir && inSub(to, from) || dst.kind == mDir && inSub(from, to) {
			return core.ErrInvalidArgument
		}
		sp.kids[sname], dp.kids[dname] = did, sid
		touch(sp)
		touch(dp)
		return nil
	}
	if exists && op.NoReplace {
		return core.ErrExists
	}
	if from == to || exists && did == sid {
		return nil // the same file: rename(2) does nothing
	}
	if exists {
		dst := m.nodes[did]
		switch {
		case src.kind == mDir && dst.kind != mDir:
			return core.ErrNotDir
		case src.kind != mDir && dst.kind == mDir:
			return core.ErrIsDir
		case dst.kind == mDir && len(dst.kids) > 0:
			return core.ErrNotEmpty
		}
	}
	delete(sp.kids, sname)
	dp.kids[dname] = sid
	touch(sp)
	touch(dp)
	return nil
}

// restored returns cur with the tree at p replaced by old's tree at p (the
// whole tree for p == ""). A whole-tree restore keeps the identity of the
// inodes cur has (it applies a diff); other inodes are new (fresh ids). A
// subtree restore may copy what it restores, so all of it gets fresh ids.
func restored(cur, old *mstate, p string, alloc func() int) *mstate {
	next := cur.clone()
	inCur := map[int]bool{}
	for _, e := range cur.entries() {
		if inSub(e.path, p) {
			inCur[e.id] = true
		}
	}
	remap := map[int]int{}
	var copyIn func(id int) int
	copyIn = func(id int) int {
		if nid, ok := remap[id]; ok {
			return nid
		}
		nid := id
		if !inCur[id] || p != "" {
			nid = alloc()
		}
		remap[id] = nid
		n := *old.nodes[id]
		if n.kind == mDir {
			kids := map[string]int{}
			for name, k := range n.kids {
				kids[name] = copyIn(k)
			}
			n.kids = kids
		}
		next.nodes[nid] = &n
		return nid
	}
	if p == "" {
		rootCopy := copyIn(rootID)
		if rootCopy != rootID {
			panic("root remapped")
		}
		return next.clone()
	}
	parent, name, err := next.parentOf(p)
	if err != nil {
		panic("restore: parent of " + p + ": " + err.Error())
	}
	delete(parent.kids, name)
	if oid, err := old.resolve(p); err == nil {
		parent.kids[name] = copyIn(oid)
	}
	touch(parent)
	return next.clone()
}

// ---------------------------------------------------------------------------
// The harness.

type wsT struct {
	name   string
	id     int64
	head   int64
	revs   map[int64]*mstate // model of every revision
	pruned map[int64]bool
	notes  map[int64]string            // what made each revision
	idmap  map[int64]map[int]uint64    // per revision: model inode id -> store inode number
	trees  map[int64]map[string]sEntry // per revision: the store's tree as last verified
}

func (w *wsT) live() []int64 {
	var out []int64
	for r := int64(1); r <= w.head; r++ {
		if w.revs[r] != nil && !w.pruned[r] {
			out = append(out, r)
		}
	}
	return out
}

type harness struct {
	t     *testing.T
	ctx   context.Context
	s     *fsstore.Store
	rng   *rand.Rand
	seed  int64
	next  int
	trace []string
	forks int
}

func runModel(t *testing.T, seed int64, revs int) {
	h := &harness{t: t, ctx: context.Background(), s: MustOpen(t), seed: seed,
		rng:  rand.New(rand.NewPCG(uint64(seed), uint64(seed)*0x9e3779b97f4a7c15)),
		next: rootID + 1}
	h.run(revs)
}

func (h *harness) alloc() int { h.next++; return h.next - 1 }

func (h *harness) logf(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf(format, args...))
}

func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	tail := h.trace
	if len(tail) > 40 && *modelSeed == 0 { // a single sequence shows its whole history
		tail = tail[len(tail)-40:]
	}
	short := ""
	if testing.Short() {
		short = " -short"
	}
	h.t.Fatalf("seed %d: %s\n--- recent history:\n%s\n--- reproduce: go test ./fsstore -run TestModel -seed=%d%s -v",
		h.seed, fmt.Sprintf(format, args...), strings.Join(tail, "\n"), h.seed, short)
}

func (h *harness) check(err error, what string) {
	h.t.Helper()
	if err != nil {
		h.fatalf("%s: %v", what, err)
	}
}

func (h *harness) run(revs int) {
	w := h.createWS("main")
	for range revs {
		h.step(w)
	}
	h.diffChecks(w, 10)

	// A fork at an older revision; it and its source evolve independently.
	f := h.fork(w, h.pickRev(w), "fork1")
	for range revs / 4 {
		h.step(f)
	}
	h.checkHeadUnchanged(w)
	for range revs / 8 {
		h.step(w)
	}
	h.checkHeadUnchanged(f)
	// A fork of the fork.
	g := h.fork(f, h.pickRev(f), "fork2")
	for range revs / 4 {
		h.step(g)
	}
	h.checkHeadUnchanged(f)
	h.checkHeadUnchanged(w)
	for range revs / 8 {
		h.step(f)
	}
	h.checkHeadUnchanged(g)
	h.diffChecks(f, 4)
	h.diffChecks(g, 4)

	// Every revision of every workspace is still as it was.
	for _, x := range []*wsT{w, f, g} {
		h.recheckAll(x)
	}

	// Deleting the middle workspace keeps what its fork reads through to.
	h.logf("delete workspace %s", f.name)
	h.check(h.s.DeleteWorkspace(h.ctx, f.id), "delete workspace")
	if _, err := h.s.Snapshot(h.ctx, f.id, core.Head); !errors.Is(err, core.ErrWorkspaceNotFound) {
		h.fatalf("snapshot of deleted workspace: %v, want core.ErrWorkspaceNotFound", err)
	}
	h.recheckAll(g)

	// Prune, verify, GC, fsck, verify again.
	h.prune(w, 1+h.rng.IntN(int(w.head)))
	h.prune(g, 1+h.rng.IntN(int(g.head)))
	h.recheckAll(w)
	h.recheckAll(g)
	h.diffChecks(w, 3)
	h.diffChecks(g, 2)
	st, err := h.s.GC(h.ctx)
	h.check(err, "gc")
	h.logf("gc: %+v", st)
	h.fsck()
	h.recheckAll(w)
	h.recheckAll(g)
	// The store still works after all that.
	for range 3 {
		h.step(w)
		h.step(g)
	}
	h.fsck()
}

func (h *harness) fsck() {
	rep, err := h.s.Check(h.ctx, fsstore.CheckOptions{AllRevisions: true, Hashes: true})
	h.check(err, "check")
	if len(rep.Problems) > 0 {
		h.fatalf("check found problems:\n  %s", strings.Join(rep.Problems, "\n  "))
	}
}

func (h *harness) createWS(name string) *wsT {
	ws, err := h.s.CreateWorkspace(h.ctx, "t", name)
	h.check(err, "create workspace")
	w := &wsT{name: name, id: ws.ID, head: ws.Head, revs: map[int64]*mstate{ws.Head: newState()},
		pruned: map[int64]bool{}, notes: map[int64]string{ws.Head: "create"}, idmap: map[int64]map[int]uint64{}, trees: map[int64]map[string]sEntry{}}
	h.checkRev(w, w.head, nil, true)
	return w
}

func (h *harness) fork(src *wsT, rev int64, name string) *wsT {
	ws, err := h.s.Fork(h.ctx, src.id, rev, name)
	h.check(err, "fork")
	h.logf("fork %s@%d -> %s", src.name, rev, name)
	if ws.Head != 1 || ws.BaseID != src.id || ws.BaseRev != rev {
		h.fatalf("fork: got %+v", ws)
	}
	w := &wsT{name: name, id: ws.ID, head: ws.Head, revs: map[int64]*mstate{1: src.revs[rev].clone()},
		pruned: map[int64]bool{}, notes: map[int64]string{1: fmt.Sprintf("fork of %s@%d", src.name, rev)}, idmap: map[int64]map[int]uint64{}, trees: map[int64]map[string]sEntry{}}
	h.checkRev(w, 1, src.idmap[rev], true) // a fork shares its source's inodes
	return w
}

// pickRev picks a live revision of w.
func (h *harness) pickRev(w *wsT) int64 {
	l := w.live()
	return l[h.rng.IntN(len(l))]
}

func (h *harness) step(w *wsT) {
	if len(w.live()) > 2 && h.rng.IntN(100) < 7 {
		h.restore(w)
	} else {
		h.batch(w)
	}
}

// batch commits a random batch and checks the result.
func (h *harness) batch(w *wsT) {
	scratch := w.revs[w.head].clone()
	n := 1 + h.rng.IntN(5)
	var ops []core.Op
	var want error
	for range n {
		op := h.genOp(scratch)
		ops = append(ops, op)
		if want = scratch.apply(op, h.alloc); want != nil {
			break
		}
	}
	var sb strings.Builder
	for _, op := range ops {
		sb.WriteString("\n    " + opString(op))
	}
	for _, op := range ops {
		count("op " + string(op.Kind))
	}
	if want != nil {
		count("batch failing: " + want.Error())
		count(fmt.Sprintf("failing op %s: %v", ops[len(ops)-1].Kind, want))
	} else {
		count("batch committed")
	}
	rev, err := h.s.Commit(h.ctx, w.id, &core.Batch{Ops: slices.Clone(ops)}, fsstore.CommitInfo{})
	if want != nil {
		h.logf("%s: batch on head %d, want %v:%s", w.name, w.head, want, sb.String())
		if err == nil {
			h.fatalf("%s: batch succeeded as revision %d, model says %v", w.name, rev.Rev, want)
		}
		if !errors.Is(err, want) {
			h.fatalf("%s: batch failed with %v, model says %v", w.name, err, want)
		}
		// A failed batch leaves no trace.
		ws, err := h.s.WorkspaceByID(h.ctx, w.id)
		h.check(err, "workspace")
		if ws.Head != w.head {
			h.fatalf("%s: failed batch moved head from %d to %d", w.name, w.head, ws.Head)
		}
		if h.rng.IntN(3) == 0 {
			h.checkRev(w, w.head, nil, false)
		}
		return
	}
	h.logf("%s: revision %d:%s", w.name, w.head+1, sb.String())
	if err != nil {
		h.fatalf("%s: batch failed: %v; model says it succeeds", w.name, err)
	}
	if rev.Rev != w.head+1 || rev.Changes != len(ops) {
		h.fatalf("%s: commit returned %+v after head %d", w.name, rev, w.head)
	}
	w.head = rev.Rev
	w.revs[w.head] = scratch.clone()
	w.notes[w.head] = "batch:" + sb.String()
	h.checkRev(w, w.head, w.idmap[w.head-1], true)
}

// restore restores the whole tree, or a subtree, to an older revision.
func (h *harness) restore(w *wsT) {
	l := w.live()
	r := l[h.rng.IntN(len(l)-1)] // not the head
	cur, old := w.revs[w.head], w.revs[r]
	p := ""
	if h.rng.IntN(100) < 65 {
		cands := restoreCandidates(cur, old)
		if len(cands) == 0 {
			return
		}
		p = cands[h.rng.IntN(len(cands))]
	}
	next := restored(cur, old, p, h.alloc)
	if p == "" {
		count("restore whole tree")
	} else {
		count("restore subtree")
	}
	h.logf("%s: restore %q from revision %d onto head %d", w.name, p, r, w.head)
	rev, err := h.s.Restore(h.ctx, w.id, r, p, fsstore.CommitInfo{})
	if err != nil {
		h.fatalf("%s: restore %q from %d: %v", w.name, p, r, err)
	}
	if rev.Rev == w.head {
		// Nothing differed: then the model must agree that nothing changed.
		h.logf("  (no new revision)")
		count("restore making no revision")
		tree := h.readTree(w.id, w.head)
		if probs, _ := h.compare(next, tree, w.idmap[w.head]); len(probs) > 0 {
			h.fatalf("%s: restore %q from %d made no revision, but the model says the tree changes:\n  %s",
				w.name, p, r, strings.Join(probs, "\n  "))
		}
		return
	}
	if rev.Rev != w.head+1 {
		h.fatalf("%s: restore returned revision %d after head %d", w.name, rev.Rev, w.head)
	}
	prev := w.idmap[w.head]
	w.head = rev.Rev
	w.revs[w.head] = next
	w.notes[w.head] = fmt.Sprintf("restore %q from %d", p, r)
	h.checkRev(w, w.head, prev, true)
	// A restore reproduces the old revision's times exactly.
	now, then := w.trees[w.head], h.verified(w, r)
	for _, q := range slices.Sorted(maps.Keys(then)) {
		if e := then[q]; inSub(q, p) && !now[q].st.Mtime.Equal(e.st.Mtime) {
			h.fatalf("%s: after restore %q from %d, %q (%s) has mtime %d, was %d", w.name, p, r, q, kindOf(e.st), now[q].st.Mtime.UnixNano(), e.st.Mtime.UnixNano())
		}
	}
}

// restoreCandidates lists subpaths a restore can be checked on: the parent
// is a directory in both trees, and no hard link crosses the subtree's edge.
func restoreCandidates(cur, old *mstate) []string {
	paths := map[string]bool{}
	for _, m := range []*mstate{cur, old} {
		for _, e := range m.entries() {
			if e.path != "" {
				paths[e.path] = true
			}
		}
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		dir, _ := splitP(p)
		ok := true
		for _, m := range []*mstate{cur, old} {
			if id, err := m.resolve(dir); err != nil || m.nodes[id].kind != mDir {
				ok = false
			}
		}
		if ok && !crosses(cur, p) && !crosses(old, p) {
			out = append(out, p)
		}
	}
	return out
}

// crosses reports whether some inode has names both inside and outside the subtree at p.
func crosses(m *mstate, p string) bool {
	in, out := map[int]bool{}, map[int]bool{}
	for _, e := range m.entries() {
		if e.n.kind == mDir {
			continue
		}
		if inSub(e.path, p) {
			in[e.id] = true
		} else {
			out[e.id] = true
		}
	}
	for id := range in {
		if out[id] {
			return true
		}
	}
	return false
}

func (h *harness) checkHeadUnchanged(w *wsT) {
	ws, err := h.s.WorkspaceByID(h.ctx, w.id)
	h.check(err, "workspace")
	if ws.Head != w.head {
		h.fatalf("%s: head moved from %d to %d", w.name, w.head, ws.Head)
	}
	h.checkRev(w, w.head, nil, false)
}

func (h *harness) recheckAll(w *wsT) {
	for _, r := range w.live() {
		h.checkRev(w, r, nil, false)
	}
}

// prune keeps the newest keep revisions of w and checks what went.
func (h *harness) prune(w *wsT, keep int) {
	h.logf("%s: prune keep last %d of head %d", w.name, keep, w.head)
	_, err := h.s.Prune(h.ctx, w.id, fsstore.Policy{KeepLast: keep})
	h.check(err, "prune")
	for r := int64(1); r <= w.head; r++ {
		if r <= w.head-int64(keep) {
			w.pruned[r] = true
		}
	}
	for r := int64(1); r <= w.head; r++ {
		_, err := h.s.Snapshot(h.ctx, w.id, r)
		switch {
		case w.pruned[r] && !errors.Is(err, core.ErrUnknownRevision):
			h.fatalf("%s: snapshot of pruned revision %d: %v, want core.ErrUnknownRevision", w.name, r, err)
		case !w.pruned[r] && err != nil:
			h.fatalf("%s: snapshot of kept revision %d: %v", w.name, r, err)
		}
		if w.pruned[r] {
			if _, err := h.s.Diff(h.ctx, w.id, r, w.head); !errors.Is(err, core.ErrUnknownRevision) {
				h.fatalf("%s: diff from pruned revision %d: %v, want core.ErrUnknownRevision", w.name, r, err)
			}
		}
	}
	log, err := h.s.Log(h.ctx, w.id, 0)
	h.check(err, "log")
	var got []int64
	for _, r := range log {
		got = append(got, r.Rev)
	}
	want := w.live()
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		h.fatalf("%s: log after prune lists %v, want %v", w.name, got, want)
	}
}

// diffChecks checks Diff between random pairs of revisions of w by applying
// each diff to a fork made at its base.
func (h *harness) diffChecks(w *wsT, n int) {
	l := w.live()
	if len(l) < 2 {
		return
	}
	for range n {
		i := h.rng.IntN(len(l))
		r1 := l[i]
		var r2 int64
		switch h.rng.IntN(4) {
		case 0: // adjacent, forwards
			if i+1 < len(l) {
				r2 = l[i+1]
			} else {
				r2 = l[i-1]
			}
		case 1: // adjacent, backwards
			if i > 0 {
				r2 = l[i-1]
			} else {
				r2 = l[i+1]
			}
		default:
			r2 = l[h.rng.IntN(len(l))]
		}
		h.checkDiff(w, r1, r2)
	}
	r := l[h.rng.IntN(len(l))]
	h.checkDiff(w, r, r)
}

func (h *harness) checkDiff(w *wsT, r1, r2 int64) {
	cs, err := h.s.Diff(h.ctx, w.id, r1, r2)
	h.check(err, fmt.Sprintf("%s: diff %d -> %d", w.name, r1, r2))
	switch {
	case r1 == r2:
		count("diff r -> r")
	case r1 > r2:
		count("diff backwards, applied")
	default:
		count("diff forwards, applied")
	}
	var sb strings.Builder
	for _, op := range cs.Ops {
		sb.WriteString("\n    " + opString(op))
	}
	h.logf("%s: diff %d -> %d:%s", w.name, r1, r2, sb.String())
	if cs.From != r1 || cs.To != r2 {
		h.fatalf("%s: diff %d -> %d says from %d to %d", w.name, r1, r2, cs.From, cs.To)
	}
	if r1 == r2 && len(cs.Ops) > 0 {
		h.fatalf("%s: diff of revision %d with itself is not empty:%s", w.name, r1, sb.String())
	}
	want := h.verified(w, r2)
	if len(cs.Ops) == 0 {
		// Then the trees are the same, times included.
		got := h.verified(w, r1)
		if probs, _ := h.compare(w.revs[r2], got, w.idmap[r1]); len(probs) > 0 {
			h.fatalf("%s: diff %d -> %d is empty, but revision %d differs from the model of %d:\n  %s",
				w.name, r1, r2, r1, r2, strings.Join(probs, "\n  "))
		}
		if probs := sameTimes(got, want); len(probs) > 0 {
			h.fatalf("%s: diff %d -> %d is empty, but times differ:\n  %s", w.name, r1, r2, strings.Join(probs, "\n  "))
		}
		return
	}
	if h.rng.IntN(2) == 0 {
		// As sync carries it: through JSON, without store-internal chunk ids.
		b, err := json.Marshal(cs)
		h.check(err, "marshal changeset")
		cs = &core.Changeset{}
		h.check(json.Unmarshal(b, cs), "unmarshal changeset")
	}
	h.forks++
	name := fmt.Sprintf("diff%d", h.forks)
	f, err := h.s.Fork(h.ctx, w.id, r1, name)
	h.check(err, "fork for diff")
	rev, err := h.s.Apply(h.ctx, f.ID, cs, fsstore.CommitInfo{Base: f.Head})
	if err != nil {
		h.fatalf("%s: applying diff %d -> %d to a fork at %d: %v", w.name, r1, r2, r1, err)
	}
	got := h.readTreeWS(f.ID, rev.Rev)
	// The fork shares the inodes of r1, and a diff keeps the identity of
	// every inode present in both revisions.
	if probs, _ := h.compare(w.revs[r2], got, w.idmap[r1]); len(probs) > 0 {
		h.fatalf("%s: diff %d -> %d applied to a fork at %d differs from the model of %d:\n  %s",
			w.name, r1, r2, r1, r2, strings.Join(probs, "\n  "))
	}
	if probs := sameTimes(got, want); len(probs) > 0 {
		h.fatalf("%s: diff %d -> %d applied to a fork at %d: times differ from revision %d:\n  %s",
			w.name, r1, r2, r1, r2, strings.Join(probs, "\n  "))
	}
	h.check(h.s.DeleteWorkspace(h.ctx, f.ID), "delete diff fork")
}

// verified returns the store's tree of w at rev as last checked against the
// model (revisions are immutable; recheckAll reads them afresh).
func (h *harness) verified(w *wsT, rev int64) map[string]sEntry {
	if w.trees[rev] == nil {
		h.checkRev(w, rev, nil, false)
	}
	return w.trees[rev]
}

// sameTimes compares the mtimes of two store trees.
func sameTimes(got, want map[string]sEntry) []string {
	var probs []string
	for _, p := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[p]
		if !ok {
			continue
		}
		if !g.st.Mtime.Equal(want[p].st.Mtime) {
			probs = append(probs, fmt.Sprintf("%q (%s): mtime %d, want %d", p, kindOf(want[p].st), g.st.Mtime.UnixNano(), want[p].st.Mtime.UnixNano()))
		}
	}
	return probs
}

// ---------------------------------------------------------------------------
// Reading and comparing trees.

type sEntry struct {
	st     core.Stat
	data   []byte
	target string
}

func kindOf(st core.Stat) mkind {
	switch st.Mode.Type() {
	case fs.ModeDir:
		return mDir
	case fs.ModeSymlink:
		return mSymlink
	}
	return mFile
}

func (h *harness) readTree(ws, rev int64) map[string]sEntry { return h.readTreeWS(ws, rev) }

// readTreeWS reads the whole tree of ws at rev through the public API.
func (h *harness) readTreeWS(ws, rev int64) map[string]sEntry {
	h.t.Helper()
	sn, err := h.s.Snapshot(h.ctx, ws, rev)
	h.check(err, fmt.Sprintf("snapshot %d@%d", ws, rev))
	if sn.Rev != rev {
		h.fatalf("snapshot of %d is at %d", rev, sn.Rev)
	}
	tree := map[string]sEntry{}
	err = sn.Walk(h.ctx, "", func(p string, st core.Stat) error {
		if _, dup := tree[p]; dup {
			return fmt.Errorf("walk visits %q twice", p)
		}
		e := sEntry{st: st}
		switch kindOf(st) {
		case mFile:
			if e.data, err = sn.ReadFile(h.ctx, p); err != nil {
				return err
			}
		case mSymlink:
			if e.target, err = sn.Readlink(h.ctx, p); err != nil {
				return err
			}
		}
		tree[p] = e
		return nil
	})
	h.check(err, fmt.Sprintf("walk %d@%d", ws, rev))
	return tree
}

// compare lists how a store tree differs from a model tree, and returns
// the tree's map of model inode ids to store inode numbers. Hard links must
// share an inode and nothing else may. Against prev, the map of an earlier
// tree (or nil), inodes must keep their numbers, and a number may pass to
// another model inode only if its old one is gone from the tree.
func (h *harness) compare(m *mstate, tree map[string]sEntry, prev map[int]uint64) ([]string, map[int]uint64) {
	var probs []string
	bad := func(format string, args ...any) {
		if len(probs) < 12 {
			probs = append(probs, fmt.Sprintf(format, args...))
		}
	}
	ids, inos := map[int]uint64{}, map[uint64]int{}
	prevOwner := map[uint64]int{}
	for id, ino := range prev {
		prevOwner[ino] = id
	}
	ents := m.entries()
	links := map[int]int{}
	for _, e := range ents {
		links[e.id]++
	}
	seen := map[string]bool{}
	for _, e := range ents {
		seen[e.path] = true
		g, ok := tree[e.path]
		if !ok {
			bad("%q (%s): missing", e.path, e.n.kind)
			continue
		}
		st := g.st
		if k := kindOf(st); k != e.n.kind {
			bad("%q: is a %s, want %s", e.path, k, e.n.kind)
			continue
		}
		if e.n.kind != mSymlink && st.Mode&permMask != e.n.perm {
			bad("%q: mode %v, want %v", e.path, st.Mode&permMask, e.n.perm)
		}
		if st.UID != e.n.uid || st.GID != e.n.gid {
			bad("%q: owner %d:%d, want %d:%d", e.path, st.UID, st.GID, e.n.uid, e.n.gid)
		}
		switch e.n.kind {
		case mFile:
			if st.Size != int64(len(e.n.data)) {
				bad("%q: size %d, want %d", e.path, st.Size, len(e.n.data))
			}
			if !bytes.Equal(g.data, e.n.data) {
				bad("%q: content %q, want %q", e.path, g.data, e.n.data)
			}
		case mSymlink:
			if g.target != e.n.target || st.Target != e.n.target || st.Size != int64(len(e.n.target)) {
				bad("%q: symlink to %q (stat %q, size %d), want %q", e.path, g.target, st.Target, st.Size, e.n.target)
			}
		}
		nlink := links[e.id]
		if e.n.kind == mDir {
			nlink = 2
			for _, k := range e.n.kids {
				if m.nodes[k].kind == mDir {
					nlink++
				}
			}
		}
		if int(st.Nlink) != nlink {
			bad("%q (%s): nlink %d, want %d", e.path, e.n.kind, st.Nlink, nlink)
		}
		if e.n.mtimeKnown && st.Mtime.UnixNano() != e.n.mtime {
			bad("%q (%s): mtime %d, want %d", e.path, e.n.kind, st.Mtime.UnixNano(), e.n.mtime)
		}
		// Inode identity.
		if ino, ok := ids[e.id]; ok && ino != st.Ino {
			bad("%q: inode %d, but its hard links have %d", e.path, st.Ino, ino)
		} else if id, ok := inos[st.Ino]; ok && id != e.id {
			bad("%q: inode %d is also another file's (model ids %d, %d)", e.path, st.Ino, id, e.id)
		} else if ino, ok := prev[e.id]; ok && ino != st.Ino {
			bad("%q: inode %d, want %d as before", e.path, st.Ino, ino)
		} else if owner, ok := prevOwner[st.Ino]; ok && owner != e.id && links[owner] > 0 {
			bad("%q: inode %d, which was and still is another file's", e.path, st.Ino)
		} else {
			ids[e.id], inos[st.Ino] = st.Ino, e.id
		}
	}
	for _, p := range slices.Sorted(maps.Keys(tree)) {
		if !seen[p] {
			bad("%q (%s): not in the model", p, kindOf(tree[p].st))
		}
	}
	return probs, ids
}

// checkRev compares revision rev of w with its model; deep also checks
// ReadDir, Stat and partial reads. A revision checked before must have the
// same inode numbers as then; a new one is checked against prev (see compare).
func (h *harness) checkRev(w *wsT, rev int64, prev map[int]uint64, deep bool) {
	h.t.Helper()
	m := w.revs[rev]
	tree := h.readTree(w.id, rev)
	if seen, ok := w.idmap[rev]; ok {
		prev = seen
	}
	probs, ids := h.compare(m, tree, prev)
	if len(probs) > 0 {
		h.fatalf("%s@%d (%s) differs from the model:\n  %s", w.name, rev, w.notes[rev], strings.Join(probs, "\n  "))
	}
	if seen, ok := w.idmap[rev]; ok && !maps.Equal(seen, ids) {
		h.fatalf("%s@%d: inode numbers changed since it was first read: %v, then %v", w.name, rev, ids, seen)
	}
	w.idmap[rev] = ids
	w.trees[rev] = tree
	if !deep {
		return
	}
	sn, err := h.s.Snapshot(h.ctx, w.id, rev)
	h.check(err, "snapshot")
	ents := m.entries()
	for _, e := range ents {
		if e.n.kind != mDir {
			continue
		}
		des, err := sn.ReadDir(h.ctx, e.path)
		h.check(err, fmt.Sprintf("readdir %q", e.path))
		names := slices.Sorted(maps.Keys(e.n.kids))
		if len(des) != len(names) {
			h.fatalf("%s@%d: readdir %q: %d entries, want %v", w.name, rev, e.path, len(des), names)
		}
		for i, de := range des {
			c := tree[joinP(e.path, names[i])]
			if de.Name != names[i] || de.Ino != c.st.Ino || de.Type != c.st.Mode.Type() {
				h.fatalf("%s@%d: readdir %q: entry %d is %+v, want %q ino %d type %v", w.name, rev, e.path, i, de, names[i], c.st.Ino, c.st.Mode.Type())
			}
		}
	}
	// Stat and a partial read of one random entry.
	e := ents[h.rng.IntN(len(ents))]
	st, err := sn.Stat(h.ctx, e.path)
	h.check(err, fmt.Sprintf("stat %q", e.path))
	if st.Ino != tree[e.path].st.Ino || st.Mode != tree[e.path].st.Mode || st.Size != tree[e.path].st.Size {
		h.fatalf("%s@%d: stat %q = %+v, walk says %+v", w.name, rev, e.path, st, tree[e.path].st)
	}
	if e.n.kind == mFile {
		f, err := sn.Open(h.ctx, e.path)
		h.check(err, "open")
		size := int64(len(e.n.data))
		off := h.rng.Int64N(size + 20)
		buf := make([]byte, 1+h.rng.IntN(40))
		n, err := f.ReadAt(buf, off)
		want := []byte{}
		if off < size {
			want = e.n.data[off:min(size, off+int64(len(buf)))]
		}
		if n != len(want) || !bytes.Equal(buf[:n], want) || (n < len(buf)) != errors.Is(err, io.EOF) || err != nil && !errors.Is(err, io.EOF) {
			h.fatalf("%s@%d: ReadAt(%q, %d bytes at %d) = %d %q %v, want %q", w.name, rev, e.path, len(buf), off, n, buf[:n], err, want)
		}
	}
	if _, err := sn.Stat(h.ctx, "zz/missing"); !errors.Is(err, core.ErrNotFound) {
		h.fatalf("stat of a missing path: %v", err)
	}
}

// ---------------------------------------------------------------------------
// Generating ops.

var names = []string{"a", "b", "c", "d", "e"}

func opString(op core.Op) string {
	s := fmt.Sprintf("%s %q", op.Kind, op.Path)
	switch op.Kind {
	case core.OpRename, core.OpLink:
		s = fmt.Sprintf("%s %q -> %q", op.Kind, op.From, op.Path)
		if op.NoReplace {
			s += " noreplace"
		}
		if op.Exchange {
			s += " exchange"
		}
	case core.OpSymlink:
		s += fmt.Sprintf(" -> %q", op.Target)
	case core.OpWrite:
		s += fmt.Sprintf(" at %d", op.Offset)
	case core.OpTruncate:
		s += fmt.Sprintf(" to %d", op.Size)
	case core.OpUtimes:
		s += fmt.Sprintf(" %d", op.Mtime)
	case core.OpChown:
		s += fmt.Sprintf(" %d:%d", op.UID, op.GID)
	}
	if op.Mode != 0 {
		s += fmt.Sprintf(" mode %v", op.Mode)
	}
	if op.Mtime != 0 && op.Kind != core.OpUtimes {
		s += fmt.Sprintf(" mtime %d", op.Mtime)
	}
	if op.Data != nil {
		s += fmt.Sprintf(" data[%d] %q", len(op.Data), op.Data)
	}
	if op.Content != nil {
		s += fmt.Sprintf(" content size %d, %d chunks", op.Content.Size, len(op.Content.Chunks))
	}
	return s
}

func (h *harness) randMode() fs.FileMode {
	modes := []fs.FileMode{0o755, 0o700, 0o644, 0o600, 0o444, 0o777, 0o750, 0o640, 0o511}
	m := modes[h.rng.IntN(len(modes))]
	if h.rng.IntN(12) == 0 {
		m |= []fs.FileMode{fs.ModeSetuid, fs.ModeSetgid, fs.ModeSticky}[h.rng.IntN(3)]
	}
	return m
}

func (h *harness) randTime() int64 {
	return time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + h.rng.Int64N(1e18)
}

func (h *harness) randData() []byte {
	var n int
	switch h.rng.IntN(8) {
	case 0:
		n = 0
	case 1:
		n = 16 * (1 + h.rng.IntN(4)) // whole chunks
	case 2, 3:
		n = 1 + h.rng.IntN(15)
	default:
		n = 17 + h.rng.IntN(80)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = "abcdefgh\x00"[h.rng.IntN(9)]
	}
	if n > 16 && h.rng.IntN(4) == 0 {
		// a run of zeros spanning a chunk
		at := h.rng.IntN(n - 16)
		clear(b[at : at+16])
	}
	return b
}

func (h *harness) randPath(maxDepth int) string {
	d := 1 + h.rng.IntN(maxDepth)
	parts := make([]string, d)
	for i := range parts {
		parts[i] = names[h.rng.IntN(len(names))]
	}
	return strings.Join(parts, "/")
}

// mangle sometimes writes a clean path in an equivalent unclean way.
func (h *harness) mangle(p string) string {
	if h.rng.IntN(25) != 0 {
		return p
	}
	switch h.rng.IntN(4) {
	case 0:
		return "/" + p + "/"
	case 1:
		return strings.ReplaceAll(p, "/", "//")
	case 2:
		return "./" + p
	default:
		return "zz/../" + p
	}
}

func (h *harness) genOp(m *mstate) core.Op {
	op := h.genOp1(m)
	op.Path = h.mangle(op.Path)
	if op.From != "" {
		op.From = h.mangle(op.From)
	}
	return op
}

func (h *harness) genOp1(m *mstate) core.Op {
	r := h.rng
	ents := m.entries()
	var all, files, regs, dirs, subdirs, emptyDirs, shallow, nonEmpty []ment
	for _, e := range ents {
		if e.path != "" {
			all = append(all, e)
		}
		switch e.n.kind {
		case mDir:
			dirs = append(dirs, e)
			if depthP(e.path) < 3 {
				shallow = append(shallow, e)
			}
			if e.path != "" {
				subdirs = append(subdirs, e)
				if len(e.n.kids) > 0 {
					nonEmpty = append(nonEmpty, e)
				} else {
					emptyDirs = append(emptyDirs, e)
				}
			}
		case mFile:
			regs = append(regs, e)
			files = append(files, e)
		default:
			files = append(files, e)
		}
	}
	pick := func(list []ment) string {
		if len(list) == 0 {
			return h.randPath(3)
		}
		return list[r.IntN(len(list))].path
	}
	newPath := func() string {
		// Mostly a free name in an existing directory.
		dir := pick(shallow)
		for range 4 {
			p := joinP(dir, names[r.IntN(len(names))])
			if _, err := m.resolve(p); errors.Is(err, core.ErrNotFound) && r.IntN(25) != 0 {
				return p
			}
		}
		return joinP(pick(shallow), names[r.IntN(len(names))])
	}
	mode := func() fs.FileMode {
		if r.IntN(3) == 0 {
			return 0
		}
		return h.randMode()
	}
	mtime := func() int64 {
		if r.IntN(4) == 0 {
			return h.randTime()
		}
		return 0
	}

	if r.IntN(100) < 4 {
		// Ops meant to fail (though some may not).
		switch r.IntN(14) {
		case 0:
			return core.Op{Kind: []core.OpKind{core.OpWrite, core.OpTruncate, core.OpChmod, core.OpUtimes, core.OpDelete}[r.IntN(5)],
				Path: h.randPath(3) + "x", Data: []byte("x"), Mode: 0o600, Mtime: 1}
		case 1:
			d := pick(nonEmpty)
			return core.Op{Kind: core.OpRename, From: d, Path: joinP(d, h.randPath(2)), Exchange: r.IntN(4) == 0}
		case 2:
			return core.Op{Kind: core.OpDelete, Path: pick(nonEmpty)}
		case 3:
			return core.Op{Kind: core.OpLink, From: pick(dirs), Path: newPath()}
		case 4:
			return core.Op{Kind: core.OpCreate, Path: pick(dirs), Data: h.randData()}
		case 5:
			return core.Op{Kind: core.OpMkdir, Path: joinP(pick(regs), "a")}
		case 6:
			return core.Op{Kind: []core.OpKind{core.OpWrite, core.OpTruncate}[r.IntN(2)], Path: pick(append(files, dirs...)), Data: []byte("y"), Size: 3}
		case 7:
			return core.Op{Kind: core.OpCreate, Path: "../" + pick(all), Data: []byte("z")}
		case 8:
			return core.Op{Kind: core.OpSymlink, Path: newPath()}
		case 9:
			return core.Op{Kind: core.OpWrite, Path: pick(regs), Offset: -1, Data: []byte("z")}
		case 10:
			return core.Op{Kind: core.OpMkdir, Path: pick(append(all, ment{path: ""}))}
		case 11:
			return core.Op{Kind: core.OpRename, From: pick(all), Path: pick(all), Exchange: r.IntN(3) == 0}
		case 12:
			return core.Op{Kind: []core.OpKind{core.OpDelete, core.OpRename, core.OpLink}[r.IntN(3)], Path: "", From: pick(all)}
		default:
			return core.Op{Kind: core.OpRename, From: h.randPath(3), Path: newPath(), NoReplace: r.IntN(2) == 0}
		}
	}

	// Keep the tree small.
	big := len(all) > 30
	w := r.IntN(100)
	if big && w < 50 {
		if r.IntN(3) == 0 {
			return core.Op{Kind: core.OpDeleteAll, Path: pick(all)}
		}
		return core.Op{Kind: core.OpDelete, Path: pick(files)}
	}
	if len(regs) == 0 && w >= 27 && w < 45 || len(files) == 0 && w >= 51 && w < 57 {
		w = 12 // nothing to write to or link: create a file instead
	}
	switch {
	case w < 12:
		return core.Op{Kind: core.OpMkdir, Path: newPath(), Mode: mode()}
	case w < 27:
		p := newPath()
		if r.IntN(3) == 0 && len(regs) > 0 {
			p = pick(regs)
		}
		return core.Op{Kind: core.OpCreate, Path: p, Data: h.randData(), Mode: mode(), Mtime: mtime()}
	case w < 38:
		p := pick(regs)
		size := 0
		if id, err := m.resolve(p); err == nil {
			size = len(m.nodes[id].data)
		}
		data := h.randData()
		if len(data) > 40 {
			data = data[:40]
		}
		return core.Op{Kind: core.OpWrite, Path: p, Offset: int64(r.IntN(size + 40)), Data: data}
	case w < 45:
		p := pick(regs)
		size := 0
		if id, err := m.resolve(p); err == nil {
			size = len(m.nodes[id].data)
		}
		return core.Op{Kind: core.OpTruncate, Path: p, Size: int64(r.IntN(size + 40))}
	case w < 51:
		targets := []string{"a", "../b", "/etc/passwd", "c/d/e", "a very long target name spanning more than sixteen bytes"}
		return core.Op{Kind: core.OpSymlink, Path: newPath(), Target: targets[r.IntN(len(targets))], Mtime: mtime()}
	case w < 57:
		return core.Op{Kind: core.OpLink, From: pick(files), Path: newPath()}
	case w < 70:
		if len(all) == 0 {
			return core.Op{Kind: core.OpMkdir, Path: newPath(), Mode: mode()}
		}
		src := all[r.IntN(len(all))]
		op := core.Op{Kind: core.OpRename, From: src.path, Path: newPath()}
		// A target that makes sense: unrelated, and for a plain rename over
		// an existing entry, of the same kind (an empty directory for one).
		var over []ment
		for _, e := range all {
			if inSub(e.path, src.path) || inSub(src.path, e.path) {
				continue
			}
			if e.n.kind == mDir && len(e.n.kids) == 0 && src.n.kind == mDir || e.n.kind != mDir && src.n.kind != mDir {
				over = append(over, e)
			}
		}
		var unrelated []ment
		for _, e := range all {
			if !inSub(e.path, src.path) && !inSub(src.path, e.path) {
				unrelated = append(unrelated, e)
			}
		}
		switch k := r.IntN(20); {
		case k < 7 && len(over) > 0:
			op.Path = pick(over)
		case k < 8:
			op.Path = pick(all) // anything, maybe nonsense
		case k < 10:
			op.NoReplace = true
		case k < 15 && len(unrelated) > 0:
			op.Exchange = true
			op.Path = pick(unrelated)
		case k < 16:
			op.Exchange = true
			op.Path = pick(all)
		}
		return op
	case w < 77:
		switch {
		case r.IntN(3) == 0 && len(emptyDirs) > 0:
			return core.Op{Kind: core.OpDelete, Path: pick(emptyDirs)}
		case r.IntN(8) == 0:
			return core.Op{Kind: core.OpDelete, Path: pick(subdirs)}
		}
		return core.Op{Kind: core.OpDelete, Path: pick(files)}
	case w < 81:
		p := pick(all)
		if r.IntN(10) == 0 {
			p = ""
		} else if r.IntN(6) == 0 {
			p = h.randPath(3)
		}
		return core.Op{Kind: core.OpDeleteAll, Path: p}
	case w < 87:
		return core.Op{Kind: core.OpChmod, Path: pick(append(regs, dirs...)), Mode: h.randMode()}
	case w < 90:
		return core.Op{Kind: core.OpChown, Path: pick(append(all, ment{path: ""})), UID: uint32(r.IntN(3)), GID: uint32(r.IntN(3))}
	default:
		return core.Op{Kind: core.OpUtimes, Path: pick(append(all, ment{path: ""})), Mtime: h.randTime()}
	}
}
