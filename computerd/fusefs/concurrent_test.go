package fusefs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"computerd/computerd/fusefs"
	"computerd/computerd/fusefs/treetest"
)

// TestConcurrentWritersAndCommits writes from several goroutines while the
// quiet-period timer commits every few milliseconds and fsyncs commit too;
// at the end the store must hold exactly what the mount shows.
func TestConcurrentWritersAndCommits(t *testing.T) {
	st := MustStore(t)
	w := MustWorkspace(t, st, "w")
	m, dir := MustMount(t, fusefs.Options{Store: st, Workspace: w.ID, QuietPeriod: 3 * time.Millisecond})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := filepath.Join(dir, fmt.Sprint("g", g))
			if err := os.Mkdir(d, 0o755); err != nil {
				errs <- err
				return
			}
			for i := range 150 {
				p := filepath.Join(d, fmt.Sprint("f", i%10))
				data := []byte(fmt.Sprintf("%d-%d %s", g, i, make([]byte, i*97)))
				if err := os.WriteFile(p, data, 0o644); err != nil {
					errs <- err
					return
				}
				switch i % 5 {
				case 1:
					os.Rename(p, filepath.Join(d, fmt.Sprint("r", i%7)))
				case 2:
					os.Remove(filepath.Join(d, fmt.Sprint("r", (i+3)%7)))
				case 3:
					f, err := os.OpenFile(p, os.O_RDWR, 0)
					if err == nil {
						f.WriteAt([]byte("X"), int64(i))
						f.Sync()
						f.Close()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatal(err)
	}
	if got, want := treetest.Store(t, st, w.ID), treetest.Dir(t, dir); got != want {
		t.Fatalf("store differs from mount:\n%s", treetest.Diff(got, want))
	}
	if _, _, err := m.Commit(bg); err != nil {
		t.Fatal(err)
	}
}
