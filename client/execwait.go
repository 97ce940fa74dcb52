package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"computerd/core"
	"computerd/wire"
)

// ExecWatch is what a bounded wait on an exec saw.
type ExecWatch struct {
	// ID is the exec's journal id.
	ID string
	// Done says the exec ended; Exec is then its record.
	Done bool
	Exec core.Exec
	// Offset is the bytes of output (both streams, in the order they were
	// written) from the exec's start to the end of what the wait
	// delivered: where a later wait goes on from.
	Offset int64
}

// ExecFor is Exec bounded in time: it starts the command (or, with
// req.Key, attaches to the one the key started), calls fn with its events
// for at most wait, and returns what it saw. The command goes on after
// the wait, found again by the watch's ID. A busy answer is asked again
// only while the wait lasts; a negative wait follows the command to its
// end.
func (c *Client) ExecFor(ctx context.Context, ws string, req wire.ExecRequest, wait time.Duration, fn func(wire.ExecEvent) error) (ExecWatch, error) {
	busyCtx := ctx
	if wait >= 0 {
		var cancel context.CancelFunc
		busyCtx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	start := time.Now()
	resp, err := c.startExec(ctx, busyCtx, ws, req)
	if err != nil {
		return ExecWatch{}, err
	}
	w := ExecWatch{ID: resp.Header.Get("Computerd-Exec-Id")}
	if wait >= 0 {
		wait = max(wait-time.Since(start), 0)
	}
	return w, w.read(resp, wait, fn)
}

// FollowExecFor streams the events of exec id after the first offset
// bytes of its output, for at most wait (negative: until it ends), and
// returns what it saw.
func (c *Client) FollowExecFor(ctx context.Context, ws, id string, offset int64, wait time.Duration, fn func(wire.ExecEvent) error) (ExecWatch, error) {
	p, err := execPath(ws, id, "/events")
	if err != nil {
		return ExecWatch{}, err
	}
	if offset < 0 {
		return ExecWatch{}, fmt.Errorf("exec %s: offset %d: %w", id, offset, core.ErrInvalidArgument)
	}
	var q url.Values
	if offset > 0 {
		q = url.Values{"offset": {strconv.FormatInt(offset, 10)}}
	}
	start := time.Now()
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: p, Query: q})
	if err != nil {
		return ExecWatch{}, err
	}
	w := ExecWatch{ID: id, Offset: offset}
	if wait >= 0 {
		wait = max(wait-time.Since(start), 0)
	}
	return w, w.read(resp, wait, fn)
}

// read takes events from resp until the exit event, or until wait (if
// not negative) has passed, which is no error: the exec runs on.
func (w *ExecWatch) read(resp *http.Response, wait time.Duration, fn func(wire.ExecEvent) error) error {
	defer resp.Body.Close()
	var over atomic.Bool
	if wait >= 0 {
		// Closing the body ends a read waiting on the stream (and, for
		// computerd, only this request: the command runs on).
		t := time.AfterFunc(wait, func() { over.Store(true); resp.Body.Close() })
		defer t.Stop()
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var ev wire.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("exec: bad event: %w", err)
		}
		if ev.Type == "output" {
			w.Offset += int64(len(ev.Bytes()))
		}
		if fn != nil {
			if err := fn(ev); err != nil {
				return err
			}
		}
		if ev.Type == "exit" && ev.Exec != nil {
			w.Done, w.Exec = true, *ev.Exec
			if w.ID == "" {
				w.ID = ev.Exec.ID
			}
			return nil
		}
	}
	if over.Load() {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("exec: event stream cut: %w", err)
	}
	return fmt.Errorf("exec: event stream ended without an exit event")
}
