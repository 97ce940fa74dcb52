package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxErrorBody bounds how much of a failed answer is read for its message.
const maxErrorBody = 1 << 20

// Caller sends requests to one computerd as one tenant. It is the one
// request path of the Go clients (package client and syncproto's), so
// they authenticate and classify failures alike.
type Caller struct {
	BaseURL string       // e.g. http://127.0.0.1:7777; a trailing slash is ignored
	Token   string       // bearer token; empty sends none
	HTTP    *http.Client // nil: http.DefaultClient
	// Header is sent with every request (syncproto's protocol version).
	Header http.Header
}

// Request is one call.
type Request struct {
	Method      string
	Path        string // from /v1 on, already escaped
	Query       url.Values
	Body        io.Reader
	ContentType string
	Header      http.Header
}

// Do sends req and returns the response of a successful (2xx) call, whose
// body the caller reads and closes. Any other answer becomes an *Error,
// decoded from the body when it is the API's, built from the status when not.
func (c *Caller) Do(ctx context.Context, req Request) (*http.Response, error) {
	u := strings.TrimRight(c.BaseURL, "/") + req.Path
	if len(req.Query) > 0 {
		u += "?" + req.Query.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, u, req.Body)
	if err != nil {
		return nil, err
	}
	for _, h := range []http.Header{c.Header, req.Header} {
		for k, v := range h {
			hr.Header[k] = v
		}
	}
	if req.ContentType != "" {
		hr.Header.Set("Content-Type", req.ContentType)
	}
	if c.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(req, resp)
}

// decodeError reads a failed answer into an *Error. An answer that is not
// the API's (a proxy's page, say) gets the code its status would have had.
func decodeError(req Request, resp *http.Response) *Error {
	e := &Error{}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if json.Unmarshal(body, e) != nil || e.Message == "" {
		*e = Error{Message: fmt.Sprintf("%s %s: %s: %s", req.Method, req.Path, resp.Status, strings.TrimSpace(string(body))), Foreign: true}
	}
	e.Status = resp.StatusCode
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	if e.Code == "" {
		e.Code = codeOfStatus(resp.StatusCode)
	}
	return e
}

// codeOfStatus is the code of an answer without one: the broadest kind of its status.
func codeOfStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalid
	case http.StatusUnauthorized:
		return CodeUnauthorized
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeExists
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusRequestTimeout:
		return CodeTimeout
	case http.StatusTooManyRequests:
		return CodeBusy
	case http.StatusInsufficientStorage:
		return CodeNoSpace
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return CodeUnavailable
	}
	return CodeInternal
}

// Call sends in (if not nil) as JSON and decodes the answer into out (if not nil).
func (c *Caller) Call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	req := Request{Method: method, Path: path, Query: query}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		req.Body, req.ContentType = bytes.NewReader(b), "application/json"
	}
	resp, err := c.Do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: bad answer: %w", method, path, err)
	}
	return nil
}
