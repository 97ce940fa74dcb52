package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// OpenAI speaks the Chat Completions API, which OpenAI-compatible servers
// (vLLM, Ollama, llama.cpp, LiteLLM) speak too.
type OpenAI struct {
	chat     openai.ChatCompletionService
	noStream bool
	retry    retrier
	apiKey   string // only to blank it out of server messages
}

var _ Provider = (*OpenAI)(nil)

// NewOpenAI returns a Provider for the Chat Completions API at cfg.BaseURL.
func NewOpenAI(cfg Config) *OpenAI {
	// The service, not openai.NewClient, so that nothing is read from
	// OPENAI_* variables: the key and base URL come from cfg alone.
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithHTTPClient(httpClient(cfg)),
		option.WithMaxRetries(0),
		option.WithMiddleware(statusMiddleware("openai", cfg.APIKey)),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &OpenAI{
		chat:     openai.NewChatCompletionService(opts...),
		noStream: cfg.NoStream,
		retry:    newRetrier(cfg),
		apiKey:   cfg.APIKey,
	}
}

func httpClient(cfg Config) *http.Client {
	if cfg.HTTPClient != nil {
		return cfg.HTTPClient
	}
	return &http.Client{}
}

// Complete asks for the next answer, streaming it unless Config.NoStream.
func (p *OpenAI) Complete(ctx context.Context, req Request, progress func(Event)) (Response, error) {
	params, err := openAIParams(req)
	if err != nil {
		return Response{}, err
	}
	emit := func(e Event) {
		if progress != nil {
			progress(e)
		}
	}
	return p.retry.run(ctx, progress, func() (Response, error) {
		if p.noStream {
			return p.whole(ctx, params, emit)
		}
		return p.stream(ctx, params, emit)
	})
}

func openAIParams(req Request) (openai.ChatCompletionNewParams, error) {
	if len(req.Messages) == 0 {
		return openai.ChatCompletionNewParams{}, ErrNoMessages
	}
	var msgs []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		msgs = append(msgs, openai.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			msgs = append(msgs, openai.UserMessage(m.Text))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Text != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Text)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      c.Name,
							Arguments: string(argsOrEmpty(c.Args)),
						},
					},
				})
			}
			msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			// Chat Completions has no error flag for a tool result.
			text := m.Text
			if m.IsError {
				text = "error: " + text
			}
			msgs = append(msgs, openai.ToolMessage(text, m.ToolCallID))
		default:
			return openai.ChatCompletionNewParams{}, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	params := openai.ChatCompletionNewParams{Model: req.Model, Messages: msgs}
	for _, t := range req.Tools {
		schema, err := schemaMap(t)
		if err != nil {
			return openai.ChatCompletionNewParams{}, err
		}
		def := openai.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(def))
	}
	if req.MaxTokens > 0 {
		params.MaxCompletionTokens = openai.Int(req.MaxTokens)
	}
	return params, nil
}

// schemaMap decodes a tool's schema; no schema means an object of no properties.
func schemaMap(t Tool) (map[string]any, error) {
	if len(t.Schema) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(t.Schema, &m); err != nil {
		return nil, fmt.Errorf("tool %q: schema: %w", t.Name, err)
	}
	return m, nil
}

// argsOrEmpty is a call's arguments fit to send back: {} for none or for
// invalid JSON, which a server would reject.
func argsOrEmpty(a json.RawMessage) json.RawMessage {
	if len(a) == 0 || !json.Valid(a) {
		return json.RawMessage(`{}`)
	}
	return a
}

func (p *OpenAI) whole(ctx context.Context, params openai.ChatCompletionNewParams, emit func(Event)) (Response, error) {
	c, err := p.chat.New(ctx, params)
	if err != nil {
		return Response{}, wrap("openai", err)
	}
	if len(c.Choices) == 0 {
		return Response{}, errors.New("openai: answer has no choices")
	}
	ch := c.Choices[0]
	msg := Message{Role: RoleAssistant, Text: ch.Message.Content}
	if msg.Text == "" {
		msg.Text = ch.Message.Refusal
	}
	if msg.Text != "" {
		emit(Event{Text: msg.Text})
	}
	for i, tc := range ch.Message.ToolCalls {
		call := ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: json.RawMessage(tc.Function.Arguments)}
		if call.ID == "" {
			call.ID = fmt.Sprintf("call_%d", i)
		}
		if len(call.Args) == 0 {
			call.Args = json.RawMessage(`{}`)
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
		emit(Event{ToolCall: call.Name})
	}
	return Response{
		Message: msg,
		Usage:   Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens},
		Stop:    openAIStop(ch.FinishReason, len(msg.ToolCalls) > 0),
	}, nil
}

// pendingCall is a tool call being assembled from stream deltas.
type pendingCall struct {
	index int64
	seq   int // order of first appearance, to keep calls apart that share an index
	ToolCall
	args strings.Builder
}

func (p *OpenAI) stream(ctx context.Context, params openai.ChatCompletionNewParams, emit func(Event)) (Response, error) {
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := p.chat.NewStreaming(ctx, params)
	defer s.Close()

	var (
		text     strings.Builder
		calls    []*pendingCall
		byIndex  = map[int64]*pendingCall{}
		finish   string
		finished bool
		usage    Usage
	)
	for s.Next() {
		chunk := s.Current()
		if chunk.JSON.Usage.Valid() && (chunk.Usage.PromptTokens > 0 || chunk.Usage.CompletionTokens > 0) {
			usage = Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			d := ch.Delta
			for _, piece := range []string{d.Content, d.Refusal} {
				if piece != "" {
					text.WriteString(piece)
					emit(Event{Text: piece})
				}
			}
			for _, tc := range d.ToolCalls {
				pc := byIndex[tc.Index]
				// A new id at a known index is a new call: some servers
				// send each call whole, all at index 0.
				if pc == nil || (tc.ID != "" && pc.ID != "" && tc.ID != pc.ID) {
					pc = &pendingCall{index: tc.Index, seq: len(calls)}
					calls = append(calls, pc)
					byIndex[tc.Index] = pc
				}
				if pc.ID == "" {
					pc.ID = tc.ID
				}
				if pc.Name == "" && tc.Function.Name != "" {
					pc.Name = tc.Function.Name
					emit(Event{ToolCall: pc.Name})
				}
				pc.args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finish, finished = ch.FinishReason, true
			}
		}
	}
	if err := s.Err(); err != nil {
		var se *ssestream.StreamError
		if errors.As(err, &se) {
			return Response{}, fmt.Errorf("openai: %w: %s", ErrStreamCut, redact(se.Message, p.apiKey))
		}
		return Response{}, wrap("openai: stream", err)
	}
	if !finished {
		return Response{}, fmt.Errorf("openai: %w", ErrStreamCut)
	}
	sort.SliceStable(calls, func(i, j int) bool {
		if calls[i].index != calls[j].index {
			return calls[i].index < calls[j].index
		}
		return calls[i].seq < calls[j].seq
	})
	msg := Message{Role: RoleAssistant, Text: text.String()}
	for i, pc := range calls {
		call := pc.ToolCall
		call.Args = json.RawMessage(pc.args.String())
		if len(call.Args) == 0 {
			call.Args = json.RawMessage(`{}`)
		}
		if call.ID == "" {
			call.ID = fmt.Sprintf("call_%d", i)
		}
		msg.ToolCalls = append(msg.ToolCalls, call)
	}
	return Response{Message: msg, Usage: usage, Stop: openAIStop(finish, len(msg.ToolCalls) > 0)}, nil
}

func openAIStop(reason string, calls bool) string {
	switch {
	case calls:
		return StopToolUse
	case reason == "stop":
		return StopEnd
	case reason == "length":
		return StopMaxTokens
	case reason == "tool_calls", reason == "function_call":
		return StopToolUse
	}
	return reason
}
