// Package testheap measures how far the Go heap grows while a function
// runs, for the tests that hold the daemon's memory bounds: a request must
// cost heap bounded by its own size, never by the size of the tree,
// the file or the changeset it touches.
package testheap

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// Growth runs fn and returns how far the heap grew above where it stood
// before fn, at its peak. The heap is sampled every 2 ms, so the figure is
// a lower bound of the true peak, close for anything that holds memory
// longer than that.
//
// The collector runs at GOGC=10 meanwhile, so the figure is what fn holds,
// not the garbage it leaves between two collections: at the default 100 a
// heap of 25 MiB may double in garbage alone, and a bound on held memory
// would fail or pass by where the collector happened to stand.
func Growth(fn func()) int64 {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapAlloc, ms.HeapAlloc
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	fn()
	close(done)
	wg.Wait()
	runtime.ReadMemStats(&ms)
	peak = max(peak, ms.HeapAlloc)
	return int64(peak) - int64(base)
}
