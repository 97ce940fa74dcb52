package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// retrier asks an attempt again, with exponential backoff, while its error
// is temporary. The SDKs' own retries are off so that the count is exact
// and a stream cut mid-answer is retried the same way as a 429.
type retrier struct {
	max  int
	base time.Duration
	cap  time.Duration
}

func newRetrier(cfg Config) retrier {
	r := retrier{max: cfg.MaxRetries, base: cfg.RetryBase, cap: cfg.RetryMax}
	if r.max == 0 {
		r.max = DefaultMaxRetries
	}
	if r.max < 0 {
		r.max = 0
	}
	if r.base <= 0 {
		r.base = DefaultRetryBase
	}
	if r.cap <= 0 {
		r.cap = DefaultRetryMax
	}
	return r
}

// run calls attempt until it succeeds, fails for good, or retries run out.
func (r retrier) run(ctx context.Context, progress func(Event), attempt func() (Response, error)) (Response, error) {
	for n := 0; ; n++ {
		resp, err := attempt()
		if err == nil {
			resp.Retries = n
			return resp, nil
		}
		if ctx.Err() != nil {
			return Response{}, ctx.Err()
		}
		wait, ok := temporary(err)
		if !ok || wait > r.cap {
			// Asking before the server's Retry-After only earns another
			// refusal: a wait beyond the cap is the caller's to decide.
			return Response{}, err
		}
		if n >= r.max {
			if n == 0 {
				return Response{}, err
			}
			return Response{}, fmt.Errorf("after %d retries: %w", n, err)
		}
		delay := r.delay(n, wait)
		if progress != nil {
			progress(Event{Retry: err, RetryIn: delay})
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return Response{}, ctx.Err()
		case <-t.C:
		}
	}
}

// delay is the wait before retry n+1: the server's Retry-After when it
// gave one, else base doubled n times, at most the cap.
func (r retrier) delay(n int, retryAfter time.Duration) time.Duration {
	d := retryAfter
	if d <= 0 {
		d = r.base
		for i := 0; i < n && d < r.cap; i++ {
			d *= 2
		}
	}
	return min(d, r.cap)
}

// temporary reports whether err may go away when asked again, and the
// delay the server asked for.
func temporary(err error) (time.Duration, bool) {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter, se.Temporary()
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 0, false
	case errors.Is(err, ErrStreamCut), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return 0, true
	case errors.As(err, &ne):
		return 0, true
	}
	return 0, false
}
