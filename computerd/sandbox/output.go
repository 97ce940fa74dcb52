package sandbox

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"time"
)

// outputs delivers both streams' events to one callback, one at a time.
type outputs struct {
	mu  sync.Mutex
	seq uint64
	out func(Event)
}

func (o *outputs) emit(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	o.out(Event{Seq: o.seq, Stream: stream, Data: bytes.Clone(data)})
}

// pump reads f until EOF (or until f is closed, which aborts it) and
// emits whole lines; a partial line goes out FlushDelay after its first
// byte arrived, or as soon as FlushSize bytes are pending. It returns the
// number of bytes read.
func (o *outputs) pump(f *os.File, stream string) int64 {
	buf := make([]byte, FlushSize)
	var (
		n            int       // bytes pending in buf: a partial line
		pendingSince time.Time // when the partial line began
		deadline     bool
		total        int64
	)
	for {
		switch {
		case n > 0:
			_ = f.SetReadDeadline(pendingSince.Add(FlushDelay))
			deadline = true
		case deadline:
			_ = f.SetReadDeadline(time.Time{})
			deadline = false
		}
		m, err := f.Read(buf[n:])
		total += int64(m)
		n += m
		if i := bytes.LastIndexByte(buf[n-m:n], '\n'); i >= 0 {
			end := n - m + i + 1
			o.emit(stream, buf[:end])
			n = copy(buf, buf[end:n])
			pendingSince = time.Time{}
		}
		if n == len(buf) {
			o.emit(stream, buf[:n])
			n, pendingSince = 0, time.Time{}
		}
		if n > 0 && pendingSince.IsZero() {
			pendingSince = time.Now()
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// The flush timer: no newline came in time.
				o.emit(stream, buf[:n])
				n, pendingSince = 0, time.Time{}
				continue
			}
			o.emit(stream, buf[:n])
			return total
		}
	}
}
