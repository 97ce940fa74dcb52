package model_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"computerd/agentctl/model"
	"computerd/agentctl/model/modeltest"
)

// conversation is a turn with parallel tool calls and their results, one an error.
func conversation() model.Request {
	return model.Request{
		Model:     "test-model",
		System:    "You are terse.",
		MaxTokens: 1000,
		Tools: []model.Tool{{
			Name:        "read",
			Description: "Read a file.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`),
		}},
		Messages: []model.Message{
			{Role: model.RoleUser, Text: "Read a and b."},
			{Role: model.RoleAssistant, Text: "Reading both.", ToolCalls: []model.ToolCall{
				{ID: "c1", Name: "read", Args: json.RawMessage(`{"path":"a"}`)},
				{ID: "c2", Name: "read", Args: json.RawMessage(`{"path":"b"}`)},
			}},
			{Role: model.RoleTool, ToolCallID: "c1", Text: "contents of a"},
			{Role: model.RoleTool, ToolCallID: "c2", Text: "no such file", IsError: true},
		},
	}
}

func TestOpenAIWire(t *testing.T) {
	srv := modeltest.New(t, modeltest.Reply("done", modeltest.Usage{}))
	if _, err := mustProvider(t, providers[0], srv, false).Complete(context.Background(), conversation(), nil); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if got, want := r.Path, "/v1/chat/completions"; got != want {
		t.Errorf("path = %q, want %q", got, want)
	}
	type function struct {
		Name       string          `json:"name"`
		Arguments  string          `json:"arguments,omitempty"`
		Desc       string          `json:"description,omitempty"`
		Parameters json.RawMessage `json:"parameters,omitempty"`
	}
	type call struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	type message struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCalls  []call  `json:"tool_calls,omitempty"`
		ToolCallID string  `json:"tool_call_id,omitempty"`
	}
	var body struct {
		Model         string    `json:"model"`
		Messages      []message `json:"messages"`
		MaxTokens     int64     `json:"max_completion_tokens"`
		Stream        bool      `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Tools []struct {
			Type     string   `json:"type"`
			Function function `json:"function"`
		} `json:"tools"`
	}
	r.Decode(t, &body)
	s := func(v string) *string { return &v }
	wantMessages := []message{
		{Role: "system", Content: s("You are terse.")},
		{Role: "user", Content: s("Read a and b.")},
		{Role: "assistant", Content: s("Reading both."), ToolCalls: []call{
			{ID: "c1", Type: "function", Function: function{Name: "read", Arguments: `{"path":"a"}`}},
			{ID: "c2", Type: "function", Function: function{Name: "read", Arguments: `{"path":"b"}`}},
		}},
		{Role: "tool", Content: s("contents of a"), ToolCallID: "c1"},
		{Role: "tool", Content: s("error: no such file"), ToolCallID: "c2"},
	}
	if got, want := body.Messages, wantMessages; !reflect.DeepEqual(got, want) {
		t.Errorf("messages =\n%s\nwant\n%s", mustJSON(t, got), mustJSON(t, want))
	}
	if body.Model != "test-model" || body.MaxTokens != 1000 || !body.Stream || !body.StreamOptions.IncludeUsage {
		t.Errorf("model %q, max_completion_tokens %d, stream %v, include_usage %v", body.Model, body.MaxTokens, body.Stream, body.StreamOptions.IncludeUsage)
	}
	if len(body.Tools) != 1 {
		t.Fatalf("%d tools, want 1", len(body.Tools))
	}
	tool := body.Tools[0]
	if tool.Type != "function" || tool.Function.Name != "read" || tool.Function.Desc != "Read a file." ||
		!jsonEqual(t, tool.Function.Parameters, conversation().Tools[0].Schema) {
		t.Errorf("tool = %s", mustJSON(t, tool))
	}
}

func TestAnthropicWire(t *testing.T) {
	srv := modeltest.New(t, modeltest.Reply("done", modeltest.Usage{}))
	if _, err := mustProvider(t, providers[1], srv, false).Complete(context.Background(), conversation(), nil); err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if got, want := r.Path, "/v1/messages"; got != want {
		t.Errorf("path = %q, want %q", got, want)
	}
	if r.Header.Get("Anthropic-Version") == "" {
		t.Errorf("no anthropic-version header")
	}
	type block struct {
		Type      string          `json:"type"`
		Text      string          `json:"text,omitempty"`
		ID        string          `json:"id,omitempty"`
		Name      string          `json:"name,omitempty"`
		Input     json.RawMessage `json:"input,omitempty"`
		ToolUseID string          `json:"tool_use_id,omitempty"`
		IsError   bool            `json:"is_error,omitempty"`
		Content   []block         `json:"content,omitempty"`
	}
	type message struct {
		Role    string  `json:"role"`
		Content []block `json:"content"`
	}
	var body struct {
		Model     string    `json:"model"`
		MaxTokens int64     `json:"max_tokens"`
		Stream    bool      `json:"stream"`
		System    []block   `json:"system"`
		Messages  []message `json:"messages"`
		Tools     []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	r.Decode(t, &body)
	want := []message{
		{Role: "user", Content: []block{{Type: "text", Text: "Read a and b."}}},
		{Role: "assistant", Content: []block{
			{Type: "text", Text: "Reading both."},
			{Type: "tool_use", ID: "c1", Name: "read", Input: json.RawMessage(`{"path":"a"}`)},
			{Type: "tool_use", ID: "c2", Name: "read", Input: json.RawMessage(`{"path":"b"}`)},
		}},
		// Both results in one user message, the error flagged.
		{Role: "user", Content: []block{
			{Type: "tool_result", ToolUseID: "c1", Content: []block{{Type: "text", Text: "contents of a"}}},
			{Type: "tool_result", ToolUseID: "c2", IsError: true, Content: []block{{Type: "text", Text: "no such file"}}},
		}},
	}
	if got := body.Messages; !jsonEqual(t, mustJSON(t, got), mustJSON(t, want)) {
		t.Errorf("messages =\n%s\nwant\n%s", mustJSON(t, got), mustJSON(t, want))
	}
	if got, want := body.System, []block{{Type: "text", Text: "You are terse."}}; !reflect.DeepEqual(got, want) {
		t.Errorf("system = %s, want %s", mustJSON(t, got), mustJSON(t, want))
	}
	if body.Model != "test-model" || body.MaxTokens != 1000 || !body.Stream {
		t.Errorf("model %q, max_tokens %d, stream %v", body.Model, body.MaxTokens, body.Stream)
	}
	if len(body.Tools) != 1 {
		t.Fatalf("%d tools, want 1", len(body.Tools))
	}
	if tool := body.Tools[0]; tool.Name != "read" || tool.Description != "Read a file." ||
		!jsonEqual(t, tool.InputSchema, conversation().Tools[0].Schema) {
		t.Errorf("tool = %s", mustJSON(t, tool))
	}
}

func TestAnthropicDefaultMaxTokens(t *testing.T) {
	srv := modeltest.New(t, modeltest.Reply("ok", modeltest.Usage{}))
	if _, err := mustProvider(t, providers[1], srv, true).Complete(context.Background(), ask("hi"), nil); err != nil {
		t.Fatal(err)
	}
	var body struct {
		MaxTokens int64 `json:"max_tokens"`
	}
	srv.Requests()[0].Decode(t, &body)
	if got, want := body.MaxTokens, int64(model.DefaultMaxTokens); got != want {
		t.Errorf("max_tokens = %d, want %d", got, want)
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
