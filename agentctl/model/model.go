// Package model talks to a chat model that can call tools, behind one
// provider-neutral interface. Two providers implement it: OpenAI's Chat
// Completions API (so any OpenAI-compatible server: vLLM, Ollama, llama.cpp,
// LiteLLM) and Anthropic's Messages API. Both stream by default, assemble
// tool calls from stream deltas, and retry rate limits, server errors and
// streams cut mid-answer themselves, asking again from the start.
//
// API keys come in Config only; they are never read from the environment
// here, never logged and never put in an error.
package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Role says who wrote a Message.
type Role string

// The roles of a conversation. The system prompt is Request.System, not a message.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool" // a tool's result, answering Message.ToolCallID
)

// Stop reasons common to both providers; any other reason a server gives
// (content_filter, refusal, ...) comes through as it was sent.
const (
	StopEnd       = "end"        // the model finished its answer
	StopToolUse   = "tool_use"   // the model wants its tool calls run
	StopMaxTokens = "max_tokens" // the answer hit Request.MaxTokens
)

// Message is one turn of a conversation.
type Message struct {
	Role Role
	Text string
	// ToolCalls are the calls an assistant message asks for; several
	// in one message are parallel calls.
	ToolCalls []ToolCall
	// ToolCallID names the call a tool message answers.
	ToolCallID string
	// IsError marks a tool result that is an error.
	IsError bool
}

// ToolCall is the model's request to run one tool.
type ToolCall struct {
	ID   string
	Name string
	// Args is the call's arguments as the model wrote them, normally a
	// JSON object; a model can write invalid JSON, so check before use.
	Args json.RawMessage
}

// Tool describes a tool the model may call.
type Tool struct {
	Name        string
	Description string
	// Schema is a JSON Schema object for the tool's arguments.
	Schema json.RawMessage
}

// Request is one question to the model: the whole conversation so far.
type Request struct {
	Model    string
	System   string
	Messages []Message
	Tools    []Tool
	// MaxTokens caps the answer; zero means DefaultMaxTokens for
	// Anthropic (which requires one) and the server's default for OpenAI
	// (sent as max_completion_tokens, which o-series models require).
	MaxTokens int64
}

// DefaultMaxTokens is the answer cap sent to Anthropic when Request.MaxTokens is zero.
const DefaultMaxTokens = 8192

// Usage counts the tokens of one answer. InputTokens counts the whole
// prompt, cached parts included.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}

// Add returns the sum of two usages, for totals over a run.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens}
}

// Response is the model's answer.
type Response struct {
	// Message has role assistant and holds text, tool calls, or both.
	Message Message
	Usage   Usage
	// Stop is why the answer ended: StopEnd, StopToolUse, StopMaxTokens or
	// the server's own word.
	Stop string
	// Retries counts the attempts made again before this answer.
	Retries int
}

// Event is progress while an answer arrives: one of Text, ToolCall or
// Retry is set. A non-streamed answer gives its whole text as one Event.
type Event struct {
	// Text is a piece of the answer's text, in order.
	Text string
	// ToolCall is the name of a tool call that began.
	ToolCall string
	// Retry is the error that ended an attempt; the request is asked again
	// after RetryIn, and everything streamed since the last Retry is void.
	Retry   error
	RetryIn time.Duration
}

// Provider is a chat model with tools. The providers here are safe for
// concurrent use.
type Provider interface {
	// Complete asks the model for the next answer to req. progress, if
	// not nil, is called from Complete's goroutine as the answer arrives.
	Complete(ctx context.Context, req Request, progress func(Event)) (Response, error)
}

// Defaults for Config's zero values.
const (
	DefaultMaxRetries = 4
	DefaultRetryBase  = 500 * time.Millisecond
	DefaultRetryMax   = 30 * time.Second
)

// Config sets up a Provider.
type Config struct {
	// BaseURL is the API root: for OpenAI with the version
	// (https://api.openai.com/v1), for Anthropic without it
	// (https://api.anthropic.com). Empty means the provider's own.
	BaseURL string
	// APIKey is sent only as the provider's auth header. Empty sends none,
	// for local servers that need none.
	APIKey string
	// HTTPClient defaults to a client without a timeout; bound a request
	// with its context.
	HTTPClient *http.Client
	// NoStream asks for the whole answer at once instead of streaming it.
	NoStream bool
	// MaxRetries is how many times a failed attempt is asked again:
	// zero means DefaultMaxRetries, negative means never.
	MaxRetries int
	// RetryBase is the first retry's delay, doubled for each next one;
	// zero means DefaultRetryBase.
	RetryBase time.Duration
	// RetryMax caps the backoff; a Retry-After longer than it is not
	// waited for but returned at once. Zero means DefaultRetryMax.
	RetryMax time.Duration
}

// Errors a caller can tell apart with errors.Is and errors.As.
var (
	// ErrStreamCut means a stream ended before its final event; it is
	// retried, and returned only when retries run out.
	ErrStreamCut = errors.New("stream ended before the answer was complete")
	// ErrNoMessages means a Request had no messages to answer.
	ErrNoMessages = errors.New("request has no messages")
)

// StatusError is an error answer from the model's server.
type StatusError struct {
	Provider string // "openai" or "anthropic"
	Status   int    // HTTP status
	Type     string // the server's error type or code, if it sent one
	Message  string // the server's message, with the API key blanked out
	// RetryAfter is the delay the server asked for, if any.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: %d %s", e.Provider, e.Status, http.StatusText(e.Status))
	if e.Type != "" {
		s += ": " + e.Type
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Temporary reports whether asking again may succeed: 408, 409, 429 and 5xx.
func (e *StatusError) Temporary() bool {
	switch {
	case e.Status == http.StatusRequestTimeout, e.Status == http.StatusConflict,
		e.Status == http.StatusTooManyRequests, e.Status >= 500:
		return true
	}
	return false
}
