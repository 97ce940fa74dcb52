package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// statusMiddleware turns every error answer into a *StatusError before
// the SDK sees it, so both providers report the same error with the
// server's message, whatever error body an OpenAI-compatible server sends.
func statusMiddleware(provider, apiKey string) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		res, err := next(req)
		if err != nil || res.StatusCode < 400 {
			return res, err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		typ, msg := errorBody(body)
		return nil, &StatusError{
			Provider:   provider,
			Status:     res.StatusCode,
			Type:       typ,
			Message:    redact(msg, apiKey),
			RetryAfter: retryAfter(res.Header, time.Now()),
		}
	}
}

// wrap puts what before err, unless err is a *StatusError, which names
// its provider already.
func wrap(what string, err error) error {
	var se *StatusError
	if errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// errorBody finds the type and message in an error body: OpenAI's and
// Anthropic's {"error":{"type","message"}}, Ollama's {"error":"..."},
// vLLM's top-level {"type","message"}, FastAPI's {"detail":...}, or text.
func errorBody(body []byte) (typ, msg string) {
	var b struct {
		Error   json.RawMessage `json:"error"`
		Type    any             `json:"type"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &b) == nil {
		var nested struct {
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Message string `json:"message"`
		}
		var flat string
		switch {
		case json.Unmarshal(b.Error, &nested) == nil && nested.Message != "":
			typ = nested.Type
			if typ == "" && nested.Code != nil {
				typ = strings.Trim(string(mustJSON(nested.Code)), `"`)
			}
			return typ, nested.Message
		case json.Unmarshal(b.Error, &flat) == nil && flat != "":
			return "", flat
		case b.Message != "":
			if s, ok := b.Type.(string); ok && s != "error" {
				typ = s
			}
			return typ, b.Message
		case len(b.Detail) > 0:
			var s string
			if json.Unmarshal(b.Detail, &s) == nil {
				return "", s
			}
			return "", string(b.Detail)
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return "", s
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// redact blanks the API key out of a server's message; servers have been
// known to echo a rejected key.
func redact(s, key string) string {
	if len(key) < 8 {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}

// retryAfter reads the delay a server asks for: retry-after-ms (OpenAI),
// Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
