package overlay

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"computerd/computerd/idmap"
)

// BenchmarkMount mounts and unmounts one exec's overlay (over a lower
// directory on local disk, so that only the mount is measured): from
// copies of the mounts made for it (not idmapped), and from the shared
// idmapped copies an exec's runner keeps (Mounts). It reports the
// mount's median and 90th percentile.
//
//	go test -run '^$' -bench BenchmarkMount -benchtime 200x ./computerd/overlay
func BenchmarkMount(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	root := b.TempDir()
	lower, layers := filepath.Join(root, "lower"), filepath.Join(root, "layers")
	for _, d := range []string{lower, layers} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	ms, err := OpenMounts(lower, layers, idmap.Default)
	if err != nil {
		b.Fatal(err)
	}
	defer ms.Close()
	for _, bc := range []struct {
		name string
		ms   *Mounts
	}{{"copies-per-exec", nil}, {"shared-idmapped", ms}} {
		n := 0 // b.Run calls the function more than once
		b.Run(bc.name, func(b *testing.B) {
			var took []time.Duration
			defer func() {
				// The mount alone, in quantiles: a release of detached
				// mounts waits for an RCU grace period, which shows in
				// the tail.
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
				b.ReportMetric(float64(took[len(took)*9/10])/1e6, "p90-ms")
			}()
			for range b.N {
				n++
				dir := filepath.Join(layers, bc.name+strconv.Itoa(n))
				for _, sub := range []string{"", "upper", "work", "mnt"} {
					if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				if err := mount(lower, dir, bc.ms); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				if err := unix.Unmount(filepath.Join(dir, "mnt"), unix.MNT_DETACH); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
