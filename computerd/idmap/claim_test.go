package idmap_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"computerd/computerd/idmap"
)

// holdEnv makes the test binary a process that claims the default range
// in the directory it names and waits to be killed (see TestClaimDies).
const holdEnv = "IDMAP_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		c, err := idmap.Default.Claim(dir, "the holder")
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(c.Path() + "\n")
		select {}
	}
	os.Exit(m.Run())
}

// MustClaim claims r in dir for owner, and gives it up at the test's end.
func MustClaim(tb testing.TB, dir string, r idmap.Range, owner string) *idmap.Claim {
	tb.Helper()
	c, err := r.Claim(dir, owner)
	if err != nil {
		tb.Fatalf("claim %v: %v", r, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// claimFiles lists the claims' files in dir.
func claimFiles(tb testing.TB, dir string) []string {
	tb.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestClaim: a range that overlaps a live claim is refused with an error
// that names its holder and a free range; ranges apart are both held;
// Close frees a claim at once.
func TestClaim(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "idranges")
	next := idmap.Range{Base: idmap.DefaultBase + idmap.DefaultSize, Size: idmap.DefaultSize}
	a := MustClaim(t, dir, idmap.Default, "/var/lib/a")
	for _, want := range []idmap.Range{
		idmap.Default,
		{Base: idmap.DefaultBase + 1000, Size: 10},
		{Base: idmap.DefaultBase - 1000, Size: 1001},
		{Base: idmap.DefaultBase + idmap.DefaultSize - 1, Size: idmap.DefaultSize},
	} {
		_, err := want.Claim(dir, "/var/lib/b")
		var ce *idmap.ClaimedError
		if !errors.Is(err, idmap.ErrClaimed) || !errors.As(err, &ce) {
			t.Fatalf("claim %v over %v: %v", want, idmap.Default, err)
		}
		if ce.Holder.Owner != "/var/lib/a" || ce.Holder.PID != os.Getpid() || ce.Holder.Range != idmap.Default {
			t.Errorf("claim %v: holder %+v", want, ce.Holder)
		}
		if msg := err.Error(); !strings.Contains(msg, "/var/lib/a") || !strings.Contains(msg, idmap.Default.String()) {
			t.Errorf("claim %v: message %q names neither the holder nor its range", want, msg)
		}
		if want.Size == idmap.DefaultSize && ce.Free != next {
			t.Errorf("claim %v: free %v, want %v", want, ce.Free, next)
		}
	}

	b := MustClaim(t, dir, next, "/var/lib/b")
	free, err := idmap.ClaimFree(dir, "/var/lib/c")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { free.Close() })
	if want := (idmap.Range{Base: idmap.DefaultBase + 2*idmap.DefaultSize, Size: idmap.DefaultSize}); free.Range != want {
		t.Errorf("ClaimFree with the first two held: %v, want %v", free.Range, want)
	}
	if got, want := claimFiles(t, dir), []string{a.Range.String(), b.Range.String(), free.Range.String()}; !slices.Equal(got, want) {
		t.Errorf("claims %q, want %q", got, want)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	MustClaim(t, dir, idmap.Range{Base: idmap.DefaultBase + 1000, Size: 10}, "/var/lib/d")
	if _, err := idmap.Default.Claim(dir, "/var/lib/e"); !errors.Is(err, idmap.ErrClaimed) {
		t.Errorf("claim over the new one: %v", err)
	}
}

// TestClaimDies: the claim of a process killed with SIGKILL frees itself,
// and the file it left goes with the next claim.
func TestClaimDies(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("holder: %v", err)
	}
	var ce *idmap.ClaimedError
	if _, err := idmap.Default.Claim(dir, "me"); !errors.As(err, &ce) || ce.Holder.PID != cmd.Process.Pid || ce.Holder.Owner != "the holder" {
		t.Fatalf("claim over a live holder: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if got := claimFiles(t, dir); !slices.Equal(got, []string{idmap.Default.String()}) {
		t.Fatalf("claims after the holder died: %q", got)
	}
	c := MustClaim(t, dir, idmap.Range{Base: idmap.DefaultBase + 5, Size: 5}, "me")
	if got := claimFiles(t, dir); !slices.Equal(got, []string{c.Range.String()}) {
		t.Errorf("claims: %q, want only the new one", got)
	}
}

// TestClaimFreeConcurrent: claims made at once never overlap.
func TestClaimFreeConcurrent(t *testing.T) {
	dir := t.TempDir()
	const n = 8
	claims := make([]*idmap.Claim, n)
	var wg sync.WaitGroup
	for i := range claims {
		wg.Go(func() {
			c, err := idmap.ClaimFree(dir, "worker")
			if err != nil {
				t.Error(err)
				return
			}
			claims[i] = c
		})
	}
	wg.Wait()
	for i, c := range claims {
		if c == nil {
			t.FailNow()
		}
		t.Cleanup(func() { c.Close() })
		for _, d := range claims[:i] {
			if c.Range.Overlaps(d.Range) {
				t.Errorf("%v overlaps %v", c.Range, d.Range)
			}
		}
	}
	if got := claimFiles(t, dir); len(got) != n {
		t.Errorf("%d claims: %q", len(got), got)
	}
}
