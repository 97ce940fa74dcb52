package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"computerd/wire"
)

// UnreachableError is a call that reached no computerd: nothing listens
// at the address, its name does not resolve, or the connection timed out.
// The request was never received, so nothing changed.
type UnreachableError struct {
	URL string // the server the client calls
	Err error  // the dial's failure
}

func (e *UnreachableError) Error() string {
	reason := e.Err.Error()
	var oe *net.OpError
	switch {
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		reason = "connection refused"
	case errors.As(e.Err, &oe) && oe.Err != nil:
		reason = oe.Err.Error()
	}
	return fmt.Sprintf("no computerd answers at %s (%s): is computerd serve running at that address?", e.URL, reason)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Do is wire.Caller's Do, a failure to reach computerd becoming an
// *UnreachableError.
func (c *Client) Do(ctx context.Context, req wire.Request) (*http.Response, error) {
	resp, err := c.Caller.Do(ctx, req)
	return resp, c.reached(err)
}

// Call is wire.Caller's Call, a failure to reach computerd becoming an
// *UnreachableError.
func (c *Client) Call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	return c.reached(c.Caller.Call(ctx, method, path, query, in, out))
}

// reached turns err into an *UnreachableError when the connection was
// never made (a dial that failed).
func (c *Client) reached(err error) error {
	var oe *net.OpError
	if err == nil || !errors.As(err, &oe) || oe.Op != "dial" {
		return err
	}
	return &UnreachableError{URL: c.BaseURL, Err: oe}
}
