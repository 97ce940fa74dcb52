package fsstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
)

// The crash test runs a writer in a child process (this test binary again,
// running TestCrashChild), kills it with SIGKILL at random moments, and
// checks after each kill that the store is intact and holds every revision
// the child acknowledged, exactly as the deterministic workload made it.

const (
	crashEnvDir   = "FSSTORE_CRASH_CHILD_DIR"
	crashTenant   = "t"
	crashWSName   = "crash"
	crashChunk    = 64  // chunk size of the crash store: multi-chunk files are cheap
	crashPerRun   = 400 // commits one child makes at most before exiting on its own
	crashMaxFiles = 16
)

// crashModel is the expected tree: the workload's state after some revision.
type crashModel struct {
	files map[string]*crashFile // hard links share one crashFile
	links map[string]string
	dirs  map[string]bool // without the root
}

type crashFile struct{ data []byte }

func newCrashModel() *crashModel {
	return &crashModel{files: map[string]*crashFile{}, links: map[string]string{}, dirs: map[string]bool{}}
}

// create sets p's contents: a new file, or new contents for every name of an existing one.
func (m *crashModel) create(p string, data []byte) {
	if f, ok := m.files[p]; ok {
		f.data = data
	} else {
		m.files[p] = &crashFile{data}
	}
}

func (m *crashModel) exists(p string) bool {
	_, f := m.files[p]
	_, l := m.links[p]
	return f || l || m.dirs[p]
}

func sortedKeys[V any](mp map[string]V) []string {
	out := make([]string, 0, len(mp))
	for k := range mp {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func crashJoin(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// crashData makes n bytes of 64-byte blocks: random, repeated (dedup) or zero (holes).
func crashData(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for off := 0; off < n; off += crashChunk {
		blk := b[off:min(off+crashChunk, n)]
		switch rng.IntN(5) {
		case 0: // zeros
		case 1:
			for i := range blk {
				blk[i] = byte('A' + rng.IntN(2))
			}
		default:
			for i := range blk {
				blk[i] = byte(rng.Uint32())
			}
		}
	}
	return b
}

// step returns the ops that make revision r (r >= 2) from the model at r-1,
// applies them to the model, and marks which creates the child should upload
// through Store.Put.
func (m *crashModel) step(r int64) (ops []core.Op, viaPut []bool) {
	rng := rand.New(rand.NewPCG(0xC0FFEE, uint64(r)))
	pickDir := func(maxDepth int) string {
		ds := []string{""}
		for _, d := range sortedKeys(m.dirs) {
			if strings.Count(d, "/") < maxDepth {
				ds = append(ds, d)
			}
		}
		return ds[rng.IntN(len(ds))]
	}
	pickFile := func() (string, bool) {
		fs := sortedKeys(m.files)
		if len(fs) == 0 {
			return "", false
		}
		return fs[rng.IntN(len(fs))], true
	}
	add := func(op core.Op, put bool) {
		ops = append(ops, op)
		viaPut = append(viaPut, put)
	}
	n := 4 + rng.IntN(9)
	for attempts := 0; len(ops) < n && attempts < 100; attempts++ {
		k := rng.IntN(21)
		if len(m.files) > crashMaxFiles && k < 5 {
			k = 12 // shrink
		}
		switch {
		case k < 2: // small file
			p := crashJoin(pickDir(3), fmt.Sprintf("f%d", rng.IntN(8)))
			if m.dirs[p] || m.links[p] != "" {
				continue
			}
			data := crashData(rng, rng.IntN(100))
			add(core.Op{Kind: core.OpCreate, Path: p, Data: data}, false)
			m.create(p, data)
		case k < 5: // multi-chunk file, up to ~130 chunks
			p := crashJoin(pickDir(3), fmt.Sprintf("f%d", rng.IntN(8)))
			if m.dirs[p] || m.links[p] != "" {
				continue
			}
			data := crashData(rng, 200+rng.IntN(8000))
			add(core.Op{Kind: core.OpCreate, Path: p, Data: data}, rng.IntN(3) == 0)
			m.create(p, data)
		case k < 8: // write into a file, maybe past its end
			p, ok := pickFile()
			if !ok {
				continue
			}
			f := m.files[p]
			off := rng.IntN(len(f.data) + 150)
			data := crashData(rng, 1+rng.IntN(1500))
			add(core.Op{Kind: core.OpWrite, Path: p, Offset: int64(off), Data: data}, false)
			f.data = modelWrite(bytes.Clone(f.data), int64(off), data)
		case k < 10: // truncate
			p, ok := pickFile()
			if !ok {
				continue
			}
			f := m.files[p]
			size := rng.IntN(2*len(f.data) + 100)
			add(core.Op{Kind: core.OpTruncate, Path: p, Size: int64(size)}, false)
			f.data = modelTruncate(bytes.Clone(f.data), int64(size))
		case k < 12: // rename a file, maybe over another
			src, ok := pickFile()
			if !ok {
				continue
			}
			dst := crashJoin(pickDir(3), fmt.Sprintf("%c%d", "fr"[rng.IntN(2)], rng.IntN(8)))
			if dst == src || m.dirs[dst] || m.links[dst] != "" {
				continue
			}
			add(core.Op{Kind: core.OpRename, From: src, Path: dst}, false)
			if m.files[dst] != m.files[src] { // renaming onto another name of the same file does nothing
				m.files[dst] = m.files[src]
				delete(m.files, src)
			}
		case k < 13: // delete a file
			p, ok := pickFile()
			if !ok {
				continue
			}
			add(core.Op{Kind: core.OpDelete, Path: p}, false)
			delete(m.files, p)
		case k < 15: // mkdir
			p := crashJoin(pickDir(2), fmt.Sprintf("d%d", rng.IntN(4)))
			if m.exists(p) {
				continue
			}
			add(core.Op{Kind: core.OpMkdir, Path: p}, false)
			m.dirs[p] = true
		case k < 16: // delete a directory with everything in it
			d := pickDir(3)
			if d == "" || rng.IntN(3) != 0 {
				continue
			}
			add(core.Op{Kind: core.OpDeleteAll, Path: d}, false)
			for p := range m.files {
				if p == d || strings.HasPrefix(p, d+"/") {
					delete(m.files, p)
				}
			}
			for p := range m.links {
				if strings.HasPrefix(p, d+"/") {
					delete(m.links, p)
				}
			}
			for p := range m.dirs {
				if p == d || strings.HasPrefix(p, d+"/") {
					delete(m.dirs, p)
				}
			}
		case k < 17: // rename a directory
			src := pickDir(3)
			if src == "" {
				continue
			}
			parent := pickDir(2)
			if parent == src || strings.HasPrefix(parent, src+"/") {
				continue
			}
			dst := crashJoin(parent, fmt.Sprintf("d%d", rng.IntN(4)))
			if m.exists(dst) {
				continue
			}
			add(core.Op{Kind: core.OpRename, From: src, Path: dst}, false)
			move := func(p string) (string, bool) {
				if p == src {
					return dst, true
				}
				if strings.HasPrefix(p, src+"/") {
					return dst + p[len(src):], true
				}
				return "", false
			}
			nf, nl, nd := map[string]*crashFile{}, map[string]string{}, map[string]bool{}
			for p, v := range m.files {
				if q, ok := move(p); ok {
					p = q
				}
				nf[p] = v
			}
			for p, v := range m.links {
				if q, ok := move(p); ok {
					p = q
				}
				nl[p] = v
			}
			for p := range m.dirs {
				if q, ok := move(p); ok {
					p = q
				}
				nd[p] = true
			}
			m.files, m.links, m.dirs = nf, nl, nd
		case k < 18: // symlink
			p := crashJoin(pickDir(3), fmt.Sprintf("l%d", rng.IntN(4)))
			if m.exists(p) {
				continue
			}
			target := fmt.Sprintf("../target/%d/%d", r, rng.IntN(1000))
			add(core.Op{Kind: core.OpSymlink, Path: p, Target: target}, false)
			m.links[p] = target
		case k < 19: // delete a symlink
			ls := sortedKeys(m.links)
			if len(ls) == 0 {
				continue
			}
			p := ls[rng.IntN(len(ls))]
			add(core.Op{Kind: core.OpDelete, Path: p}, false)
			delete(m.links, p)
		case k < 20: // a hard link, or swap two files
			src, ok := pickFile()
			if !ok {
				continue
			}
			if rng.IntN(2) == 0 {
				dst := crashJoin(pickDir(3), fmt.Sprintf("h%d", rng.IntN(6)))
				if m.exists(dst) {
					continue
				}
				add(core.Op{Kind: core.OpLink, From: src, Path: dst}, false)
				m.files[dst] = m.files[src]
				continue
			}
			dst, _ := pickFile()
			if dst == src {
				continue
			}
			add(core.Op{Kind: core.OpRename, From: src, Path: dst, Exchange: true}, false)
			m.files[src], m.files[dst] = m.files[dst], m.files[src]
		default: // an empty file
			p := crashJoin(pickDir(3), fmt.Sprintf("f%d", rng.IntN(8)))
			if m.dirs[p] || m.links[p] != "" {
				continue
			}
			add(core.Op{Kind: core.OpCreate, Path: p}, false)
			m.create(p, []byte{})
		}
	}
	if len(ops) == 0 {
		p := fmt.Sprintf("fallback%d", r%3)
		add(core.Op{Kind: core.OpCreate, Path: p, Data: []byte(p)}, false)
		m.create(p, []byte(p))
	}
	return ops, viaPut
}

// entries is the model as path -> description.
func (m *crashModel) entries() map[string]string {
	out := map[string]string{}
	for p, v := range m.files {
		out[p] = fmt.Sprintf("file %x", sha256.Sum256(v.data))
	}
	for p, v := range m.links {
		out[p] = "symlink " + v
	}
	for p := range m.dirs {
		out[p] = "dir"
	}
	return out
}

func crashDigest(es map[string]string) [32]byte {
	h := sha256.New()
	for _, p := range sortedKeys(es) {
		fmt.Fprintf(h, "%q %s\n", p, es[p])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// crashTreeEntries reads a revision the way entries describes a model.
func crashTreeEntries(ctx context.Context, s *fsstore.Store, ws, rev int64) (map[string]string, error) {
	sn, err := s.Snapshot(ctx, ws, rev)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	err = sn.Walk(ctx, "", func(p string, st core.Stat) error {
		switch {
		case p == "":
		case st.IsDir():
			out[p] = "dir"
		case st.Mode.IsRegular():
			data, err := sn.ReadFile(ctx, p)
			if err != nil {
				return err
			}
			if int64(len(data)) != st.Size {
				return fmt.Errorf("%s: read %d bytes, size %d", p, len(data), st.Size)
			}
			out[p] = fmt.Sprintf("file %x", sha256.Sum256(data))
		default:
			out[p] = "symlink " + st.Target
		}
		return nil
	})
	return out, err
}

// crashModelAt replays the workload up to revision rev.
func crashModelAt(rev int64) *crashModel {
	m := newCrashModel()
	for r := int64(2); r <= rev; r++ {
		m.step(r)
	}
	return m
}

// TestCrashChild is the writer process of TestCrashRecovery.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		t.Skip("the writer process of TestCrashRecovery")
	}
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "crash child: "+format+"\n", args...)
		os.Exit(3)
	}
	ctx := context.Background()
	s := fsstore.New(dir)
	s.ChunkSize = crashChunk
	if err := s.Open(ctx); err != nil {
		die("open: %v", err)
	}
	w, err := s.Workspace(ctx, crashTenant, crashWSName)
	if errors.Is(err, core.ErrWorkspaceNotFound) {
		if w, err = s.CreateWorkspace(ctx, crashTenant, crashWSName); err != nil {
			die("create: %v", err)
		}
		fmt.Printf("committed %d\n", w.Head)
	} else if err != nil {
		die("workspace: %v", err)
	}
	m := crashModelAt(w.Head)
	fmt.Printf("opened %d\n", w.Head)
	for r := w.Head + 1; r <= w.Head+crashPerRun; r++ {
		ops, viaPut := m.step(r)
		for i, put := range viaPut {
			if put {
				c, err := s.Put(ctx, bytes.NewReader(ops[i].Data))
				if err != nil {
					die("put: %v", err)
				}
				ops[i].Data, ops[i].Content = nil, c
			}
		}
		rev, err := s.Commit(ctx, w.ID, &core.Batch{Ops: ops}, fsstore.CommitInfo{Message: fmt.Sprint("rev ", r)})
		if err != nil {
			die("commit %d: %v\nops: %v", r, err, ops)
		}
		if rev.Rev != r {
			die("committed revision %d, want %d", rev.Rev, r)
		}
		fmt.Printf("committed %d\n", r) // one write(2): only after Commit returned
		if r%25 == 0 {
			if _, err := s.GC(ctx); err != nil {
				die("gc: %v", err)
			}
		}
		// Pause a little at times, so that the kills, which land anywhere,
		// do not pile up revisions the parent has to check over and over.
		time.Sleep(time.Duration(rand.IntN(6000)) * time.Microsecond)
	}
	if err := s.Close(); err != nil {
		die("close: %v", err)
	}
	fmt.Println("done")
}

func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashEnvDir) != "" {
		t.Skip("in the child")
	}
	cycles := 30
	if testing.Short() {
		cycles = 6
	}
	ctx := context.Background()
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 99))

	// digests[r] is the expected digest of revision r; cursor is the model at len(digests)-1.
	digests := [][32]byte{{}, crashDigest(newCrashModel().entries())}
	cursor := newCrashModel()
	expect := func(rev int64) [32]byte {
		for int64(len(digests)) <= rev {
			cursor.step(int64(len(digests)))
			digests = append(digests, crashDigest(cursor.entries()))
		}
		return digests[rev]
	}
	verifyRev := func(s *fsstore.Store, ws, rev int64) {
		t.Helper()
		got, err := crashTreeEntries(ctx, s, ws, rev)
		if err != nil {
			t.Fatalf("read revision %d: %v", rev, err)
		}
		if crashDigest(got) == expect(rev) {
			return
		}
		want := crashModelAt(rev).entries()
		var diffs []string
		for _, p := range sortedKeys(want) {
			if got[p] != want[p] {
				diffs = append(diffs, fmt.Sprintf("%q: got %q, want %q", p, got[p], want[p]))
			}
		}
		for _, p := range sortedKeys(got) {
			if _, ok := want[p]; !ok {
				diffs = append(diffs, fmt.Sprintf("%q: got %q, want nothing", p, got[p]))
			}
		}
		t.Fatalf("revision %d differs from the workload:\n%s", rev, strings.Join(diffs, "\n"))
	}

	var lastAck, verified int64
	var kills, selfExits, totalAcks int
	var checkTime time.Duration
	for cycle := 0; cycle < cycles; cycle++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=2m")
		cmd.Env = append(os.Environ(), crashEnvDir+"="+dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			br := bufio.NewReader(out)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return // a line cut short by the kill is not an acknowledgement
				}
				lines <- strings.TrimSuffix(line, "\n")
			}
		}()
		// Kill at a random moment: sometimes counted from the start (it may
		// hit Open or the first commits), mostly from when the child is ready.
		delay := time.Duration(2+rng.IntN(200)) * time.Millisecond
		var timer <-chan time.Time
		if rng.IntN(5) == 0 {
			timer = time.After(delay)
		}
		acks := 0
		killed := false
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				switch f := strings.Fields(line); {
				case len(f) == 2 && f[0] == "committed":
					r, err := strconv.ParseInt(f[1], 10, 64)
					if err != nil {
						t.Fatalf("bad line %q", line)
					}
					if r <= lastAck && !(r == 1 && lastAck == 0) {
						t.Fatalf("child acknowledged %d after %d", r, lastAck)
					}
					lastAck = r
					acks++
				case len(f) == 2 && f[0] == "opened":
					if timer == nil {
						timer = time.After(delay)
					}
				}
			case <-timer:
				if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
					killed = true
				}
				timer = nil
			}
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			selfExits++
		case killed && errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			kills++
		default:
			t.Fatalf("cycle %d: child failed: %v\n%s", cycle, err, stderr.String())
		}
		totalAcks += acks

		// Reopen and check everything.
		start := time.Now()
		s := fsstore.New(dir)
		if err := s.Open(ctx); err != nil {
			t.Fatalf("cycle %d: reopen: %v", cycle, err)
		}
		w, err := s.Workspace(ctx, crashTenant, crashWSName)
		if errors.Is(err, core.ErrWorkspaceNotFound) && lastAck == 0 {
			s.Close()
			continue // killed before it made the workspace
		} else if err != nil {
			t.Fatalf("cycle %d: workspace: %v (last acknowledged %d)", cycle, err, lastAck)
		}
		if w.Head < lastAck {
			t.Fatalf("cycle %d: head %d, but revision %d was acknowledged", cycle, w.Head, lastAck)
		}
		rep, err := s.Check(ctx, fsstore.CheckOptions{AllRevisions: true, Hashes: true})
		if err != nil {
			t.Fatalf("cycle %d: check: %v", cycle, err)
		}
		if len(rep.Problems) > 0 {
			t.Fatalf("cycle %d: check found problems:\n%s", cycle, strings.Join(rep.Problems, "\n"))
		}
		log, err := s.Log(ctx, w.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(log)) != w.Head || log[0].Rev != w.Head || log[len(log)-1].Rev != 1 {
			t.Fatalf("cycle %d: log holds %d revisions for head %d", cycle, len(log), w.Head)
		}
		for r := verified + 1; r <= w.Head; r++ {
			verifyRev(s, w.ID, r)
		}
		for i := 0; i < 3 && verified > 1; i++ {
			verifyRev(s, w.ID, 1+rng.Int64N(verified))
		}
		verified = w.Head
		checkTime += time.Since(start)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("cycle %d: killed=%v after %v, %d acks, head %d", cycle, killed, delay, acks, w.Head)
	}

	// Finally every revision once more, and the store still takes commits.
	s := fsstore.New(dir)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := s.Workspace(ctx, crashTenant, crashWSName)
	if err != nil {
		t.Fatal(err)
	}
	for r := int64(1); r <= w.Head; r++ {
		verifyRev(s, w.ID, r)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	bbCheck(t, s)
	ops, _ := crashModelAt(w.Head).step(w.Head + 1)
	if _, err := s.Commit(ctx, w.ID, &core.Batch{Ops: ops}, fsstore.CommitInfo{}); err != nil {
		t.Fatal(err)
	}
	verifyRev(s, w.ID, w.Head+1)
	t.Logf("%d cycles: %d kills, %d clean exits, %d acknowledged commits, %d revisions, checks took %v", cycles, kills, selfExits, totalAcks, w.Head+1, checkTime)
	if kills == 0 {
		t.Error("the child was never killed")
	}
}
