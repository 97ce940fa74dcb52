package fsstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"computerd/core"
	"computerd/fsstore"
	"computerd/internal/powercut"
)

// The power-cut test runs a writer in a child process (this test binary
// again, running TestPowerCutChild) on a store whose disk keeps only what
// it was told to flush (internal/powercut: an ext4 file system on a loop
// device over a FUSE file that caches writes until an fsync). At a random
// moment the child is stopped and the power cut; then the disk is mounted
// again, as after a reboot, and every write the child acknowledged must be
// there as it was acknowledged: each revision with the number it was given
// and what it held, each journal record, token, revocation and quota; and
// fsck must find the store whole. The next round goes on from what the
// cut left.
//
// The child acknowledges what a computerd does: file commits from several
// writers at once (API writes), an exec's record, the revision naming it
// and its final record, and, through a second, shared Store as `computerd
// token create|revoke` and `tenant set` open one, tokens, revocations and
// quotas. It prints one line per acknowledgement, once the call returned.

const (
	powerCutEnvDir     = "FSSTORE_POWERCUT_DIR"
	powerCutEnvRound   = "FSSTORE_POWERCUT_ROUND"
	powerCutEnvNoFsync = "FSSTORE_POWERCUT_NOFSYNC"
	powerCutWriters    = 3
	powerCutImage      = 1 << 30 // sparse: the WAL may grow by hundreds of MiB in a round
)

// TestPowerCut: with the default durability no acknowledged write is lost.
func TestPowerCut(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 3
	}
	if lost := runPowerCuts(t, rounds, false); lost != 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
}

// TestPowerCutNoFsync shows that the emulated disk loses what it should:
// with Store.NoFsync, which acknowledges commits before they are on the
// disk, writes the child was told were done are gone after a cut (and
// their revision numbers come again).
func TestPowerCutNoFsync(t *testing.T) {
	if lost := runPowerCuts(t, 3, true); lost == 0 {
		t.Error("no acknowledged write was lost with NoFsync: the disk kept what was never flushed")
	}
}

// powerCutLedger is what the child acknowledged, over every round.
type powerCutLedger struct {
	revs     map[int64]string // revision -> the path it created
	execs    map[string]string
	execRevs map[string]int64
	tokens   map[string]string // id -> secret
	revoking map[string]bool   // a revocation was asked (maybe done)
	revoked  map[string]bool   // ... and acknowledged
	quota    int64             // the last quota acknowledged
	acks     int
}

// add records one line of the child's output; it reports a revision
// number acknowledged twice.
func (l *powerCutLedger) add(line string) error {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "ack" && f[0] != "intent" {
		return nil
	}
	if f[0] == "intent" {
		if f[1] == "revoke" && len(f) == 3 {
			l.revoking[f[2]] = true
		}
		return nil
	}
	l.acks++
	switch {
	case f[1] == "rev" && len(f) == 4:
		rev, _ := strconv.ParseInt(f[2], 10, 64)
		if old, ok := l.revs[rev]; ok {
			return fmt.Errorf("revision %d acknowledged for %s, and before for %s", rev, f[3], old)
		}
		l.revs[rev] = f[3]
	case f[1] == "exec" && len(f) == 4:
		l.execs[f[2]] = f[3]
	case f[1] == "execrev" && len(f) == 4:
		l.execRevs[f[2]], _ = strconv.ParseInt(f[3], 10, 64)
	case f[1] == "token" && len(f) == 4:
		l.tokens[f[2]] = f[3]
	case f[1] == "revoke" && len(f) == 3:
		l.revoked[f[2]] = true
	case f[1] == "quota" && len(f) == 3:
		l.quota, _ = strconv.ParseInt(f[2], 10, 64)
	default:
		return fmt.Errorf("unknown acknowledgement %q", line)
	}
	return nil
}

// powerCutContent is what the file at path holds.
func powerCutContent(path string) []byte {
	h := sha256.Sum256([]byte(path))
	return bytes.Repeat(h[:], 1+int(h[0])%64)
}

// runPowerCuts cuts the power under the child rounds times and returns
// how many acknowledged writes were missing after the cuts.
func runPowerCuts(t *testing.T, rounds int, noFsync bool) (lost int) {
	if os.Getenv(powerCutEnvDir) != "" {
		t.Skip("in the child")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, /dev/fuse and loop devices")
	}
	ctx := context.Background()
	tmp := t.TempDir()
	image := filepath.Join(tmp, "image")
	if err := powercut.Format(image, powerCutImage); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	l := &powerCutLedger{revs: map[int64]string{}, execs: map[string]string{}, execRevs: map[string]int64{},
		tokens: map[string]string{}, revoking: map[string]bool{}, revoked: map[string]bool{}}
	for round := range rounds {
		// Half the cuts keep nothing of the disk's cache, half a random
		// half of its blocks, as a disk may have written them by then.
		keep := float64(round%2) / 2
		run := time.Duration(700+rng.IntN(1300)) * time.Millisecond
		acks, blocks := powerCutRound(t, image, filepath.Join(tmp, fmt.Sprint("m", round)), round, noFsync, run, rng, keep, l)
		missing := bootPowerCut(ctx, t, image, filepath.Join(tmp, fmt.Sprint("boot", round)), l, noFsync)
		t.Logf("round %d: ran %v, %d acknowledgements (%d in all), cut dropping %d unflushed blocks (keeping %.0f%%): %d missing",
			round, run, acks, l.acks, blocks, keep*100, missing)
		lost += missing
		if t.Failed() || noFsync && lost > 0 {
			break // with NoFsync one cut that loses writes shows enough
		}
	}
	if l.acks < 100 && !t.Failed() {
		t.Errorf("only %d acknowledgements over the cuts: the test did not exercise much", l.acks)
	}
	return lost
}

// powerCutRound starts a machine on image, runs the child on it for run,
// stops it, cuts the power and takes the machine down. It returns the
// child's acknowledgements and the unflushed blocks the cut dropped.
func powerCutRound(t *testing.T, image, dir string, round int, noFsync bool, run time.Duration, rng *rand.Rand, keep float64, l *powerCutLedger) (acks, blocks int) {
	t.Helper()
	m, err := powercut.Start(image, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	}()
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestPowerCutChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), powerCutEnvDir+"="+filepath.Join(m.Root, "data"),
		powerCutEnvRound+"="+strconv.Itoa(round), powerCutEnvNoFsync+"="+strconv.FormatBool(noFsync))
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill() // before the machine goes, even on a failure
		cmd.Wait()
	}()
	var lines []string
	read := make(chan error, 1)
	go func() {
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				read <- err // a line without its end was never acknowledged
				return
			}
			lines = append(lines, strings.TrimSpace(line))
		}
	}()
	time.Sleep(run)
	// The child stops first: what it acknowledges after the cut is not
	// on any disk, and it must acknowledge nothing more.
	cmd.Process.Signal(syscall.SIGSTOP)
	blocks, err = m.Cut(rng, keep)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	if err := <-read; err != io.EOF && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "ack ") {
			acks++
		}
		if err := l.add(line); err != nil && !noFsync {
			t.Error(err) // with NoFsync, a lost revision's number comes again
		}
	}
	if bytes.Contains(stderr.Bytes(), []byte("powercut child:")) {
		t.Fatalf("the child failed before the cut:\n%s", stderr.Bytes())
	}
	return acks, blocks
}

// bootPowerCut mounts image at dir, as a machine booting after the cut,
// and checks the store there (checkPowerCut).
func bootPowerCut(ctx context.Context, t *testing.T, image, dir string, l *powerCutLedger, noFsync bool) int {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unmount, err := powercut.Mount(image, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unmount(); err != nil {
			t.Error(err)
		}
	}()
	return checkPowerCut(ctx, t, filepath.Join(dir, "data"), l, noFsync)
}

// checkPowerCut opens the store at dir as booted after a cut, checks it
// whole (fsck of every head) and counts the acknowledged writes it lacks.
// With noFsync the losses are expected and only counted.
func checkPowerCut(ctx context.Context, t *testing.T, dir string, l *powerCutLedger, noFsync bool) (missing int) {
	t.Helper()
	if len(l.revs) == 0 && len(l.tokens) == 0 {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return 0 // cut before the child made its store
		}
	}
	s := fsstore.New(dir)
	if err := s.Open(ctx); err != nil {
		t.Fatalf("open the store after the cut: %v", err)
	}
	defer s.Close()
	rep, err := s.Check(ctx, fsstore.CheckOptions{Hashes: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Errorf("fsck after the cut: %s", p)
	}
	lose := func(format string, args ...any) {
		missing++
		if !noFsync && missing <= 20 {
			t.Errorf("after the cut: "+format, args...)
		}
	}
	w, err := s.Workspace(ctx, "t", "w")
	if errors.Is(err, core.ErrWorkspaceNotFound) && len(l.revs) > 0 {
		lose("workspace w is gone, with %d acknowledged revisions", len(l.revs))
	} else if err != nil && len(l.revs) > 0 {
		t.Fatal(err)
	}
	for rev, path := range l.revs {
		if w.ID == 0 {
			break
		}
		sn, err := s.Snapshot(ctx, w.ID, rev)
		if err != nil {
			lose("revision %d (creating %s): %v", rev, path, err)
			continue
		}
		got, err := sn.ReadFile(ctx, path)
		if err != nil || !bytes.Equal(got, powerCutContent(path)) {
			lose("revision %d does not hold %s as acknowledged (%d bytes, %v): its number went to other contents", rev, path, len(got), err)
		}
	}
	for id, state := range l.execs {
		e, err := s.ExecByID(ctx, id)
		switch {
		case err != nil:
			lose("exec %s (%s): %v", id, state, err)
		case state == "exited" && e.State != core.ExecExited:
			lose("exec %s: %s, acknowledged exited", id, e.State)
		case state == "exited" && e.Rev != l.execRevs[id]:
			lose("exec %s: revision %d, acknowledged %d", id, e.Rev, l.execRevs[id])
		}
	}
	for id, secret := range l.tokens {
		_, err := s.CheckToken(ctx, secret)
		switch {
		case l.revoked[id] && err == nil:
			lose("token %s was revoked, and works again", id)
		case !l.revoking[id] && err != nil:
			lose("token %s: %v", id, err)
		}
	}
	if l.quota > 0 {
		set, err := s.QuotaSetting(ctx, "q")
		if err != nil {
			t.Fatal(err)
		}
		if set.MaxBytes == nil || *set.MaxBytes < l.quota {
			lose("quota of q: %v, acknowledged %d", set.MaxBytes, l.quota)
		}
	}
	return missing
}

// TestPowerCutChild is the child of the power-cut test: it writes to the
// store at $FSSTORE_POWERCUT_DIR until it is killed, printing each
// acknowledgement once the call returned.
func TestPowerCutChild(t *testing.T) {
	dir := os.Getenv(powerCutEnvDir)
	if dir == "" {
		t.Skip("the writer process of TestPowerCut")
	}
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "powercut child: "+format+"\n", args...)
		os.Exit(3)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...) // one write(2) per line
	}
	round := os.Getenv(powerCutEnvRound)
	ctx := context.Background()
	s := fsstore.New(dir)
	s.NoFsync = os.Getenv(powerCutEnvNoFsync) == "true"
	if err := s.Open(ctx); err != nil {
		die("open: %v", err)
	}
	// Beside it, as `computerd token create` opens one beside a daemon.
	shared := fsstore.New(dir)
	shared.Shared = true
	shared.NoFsync = s.NoFsync
	if err := shared.Open(ctx); err != nil {
		die("open shared: %v", err)
	}
	w, err := s.Workspace(ctx, "t", "w")
	if errors.Is(err, core.ErrWorkspaceNotFound) {
		w, err = s.CreateWorkspace(ctx, "t", "w")
	}
	if err != nil {
		die("workspace: %v", err)
	}
	write := func(path string, info fsstore.CommitInfo) core.Revision {
		up := s.NewUploader()
		defer up.Close()
		c, err := up.Put(ctx, bytes.NewReader(powerCutContent(path)))
		if err == nil {
			err = up.Flush(ctx)
		}
		if err != nil {
			die("put %s: %v", path, err)
		}
		info.Tenant, info.Metered = "t", true
		rev, err := s.Commit(ctx, w.ID, &core.Batch{Ops: []core.Op{{Kind: core.OpCreate, Path: path, Content: c}}}, info)
		if err != nil {
			die("commit %s: %v", path, err)
		}
		return rev
	}
	// Pauses between calls keep the WAL within the disk: it is not reset
	// while commits follow each other without a gap (the checkpointer
	// never catches up with them), and grows by every page they write.
	pause := func() { time.Sleep(time.Duration(2000+rand.IntN(8000)) * time.Microsecond) }
	var g sync.WaitGroup
	for k := range powerCutWriters {
		g.Go(func() {
			for i := 0; ; i++ {
				p := fmt.Sprintf("f%s-%d-%d", round, k, i)
				say("ack rev %d %s", write(p, fsstore.CommitInfo{Source: core.SourceAPI}).Rev, p)
				pause()
			}
		})
	}
	g.Go(func() { // execs: record, revision, final record
		for i := 0; ; i++ {
			e, _, err := s.BeginExec(ctx, core.Exec{Tenant: "t", WS: w.ID, WSName: w.Name, Argv: []string{"true"}})
			if err != nil {
				die("begin exec: %v", err)
			}
			say("ack exec %s running", e.ID)
			p := fmt.Sprintf("e%s-%d", round, i)
			rev := write(p, fsstore.CommitInfo{Source: core.SourceExec, ExecID: e.ID})
			say("ack rev %d %s", rev.Rev, p)
			e.State, e.Rev, e.Ended = core.ExecExited, rev.Rev, s.Now()
			if err := s.UpdateExec(ctx, e); err != nil {
				die("update exec: %v", err)
			}
			say("ack execrev %s %d", e.ID, rev.Rev)
			say("ack exec %s exited", e.ID)
			pause()
		}
	})
	g.Go(func() { // tokens and quotas, through the shared store
		for i := 1; ; i++ {
			secret, tok, err := shared.CreateToken(ctx, "t")
			if err != nil {
				die("create token: %v", err)
			}
			say("ack token %s %s", tok.ID, secret)
			if i%3 == 0 {
				say("intent revoke %s", tok.ID)
				if err := shared.RevokeToken(ctx, tok.ID); err != nil {
					die("revoke: %v", err)
				}
				say("ack revoke %s", tok.ID)
			}
			q := time.Now().UnixNano()
			if err := shared.SetQuota(ctx, "q", fsstore.QuotaSetting{MaxBytes: &q}); err != nil {
				die("set quota: %v", err)
			}
			say("ack quota %d", q)
			pause()
		}
	})
	time.AfterFunc(time.Minute, func() { die("not killed after a minute") })
	g.Wait()
}
