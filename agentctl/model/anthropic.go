package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// Anthropic speaks Anthropic's Messages API.
type Anthropic struct {
	messages anthropic.MessageService
	noStream bool
	retry    retrier
	apiKey   string // only to blank it out of server messages
}

var _ Provider = (*Anthropic)(nil)

// NewAnthropic returns a Provider for the Messages API at cfg.BaseURL.
func NewAnthropic(cfg Config) *Anthropic {
	opts := []option.RequestOption{
		// Nothing from ANTHROPIC_* variables or profile files: the key
		// and base URL come from cfg alone.
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(httpClient(cfg)),
		option.WithMaxRetries(0),
		option.WithMiddleware(statusMiddleware("anthropic", cfg.APIKey)),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey != "" {
		// x-api-key, the Messages API's own header, rather than the SDK's
		// Authorization: Bearer: Anthropic-compatible proxies know it.
		opts = append(opts, option.WithHeader("X-Api-Key", cfg.APIKey))
	}
	client := anthropic.NewClient(opts...)
	return &Anthropic{
		messages: client.Messages,
		noStream: cfg.NoStream,
		retry:    newRetrier(cfg),
		apiKey:   cfg.APIKey,
	}
}

// Complete asks for the next answer, streaming it unless Config.NoStream.
func (p *Anthropic) Complete(ctx context.Context, req Request, progress func(Event)) (Response, error) {
	params, err := anthropicParams(req)
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

func anthropicParams(req Request) (anthropic.MessageNewParams, error) {
	if len(req.Messages) == 0 {
		return anthropic.MessageNewParams{}, ErrNoMessages
	}
	params := anthropic.MessageNewParams{Model: anthropic.Model(req.Model), MaxTokens: req.MaxTokens}
	if params.MaxTokens <= 0 {
		params.MaxTokens = DefaultMaxTokens
	}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	// Tool results and user text that follow one another make one user
	// message: the API wants every result of an assistant turn's parallel
	// calls in the next user message.
	var user []anthropic.ContentBlockParamUnion
	flush := func() {
		if len(user) > 0 {
			params.Messages = append(params.Messages, anthropic.NewUserMessage(user...))
			user = nil
		}
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			if m.Text != "" {
				user = append(user, anthropic.NewTextBlock(m.Text))
			}
		case RoleTool:
			r := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Text != "" {
				r.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: m.Text}}}
			}
			if m.IsError {
				r.IsError = anthropic.Bool(true)
			}
			user = append(user, anthropic.ContentBlockParamUnion{OfToolResult: &r})
		case RoleAssistant:
			flush()
			var blocks []anthropic.ContentBlockParamUnion
			if m.Text != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, argsOrEmpty(c.Args), c.Name))
			}
			if len(blocks) > 0 { // the API refuses empty text blocks
				params.Messages = append(params.Messages, anthropic.NewAssistantMessage(blocks...))
			}
		default:
			return anthropic.MessageNewParams{}, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	flush()
	for _, t := range req.Tools {
		schema, err := schemaMap(t)
		if err != nil {
			return anthropic.MessageNewParams{}, err
		}
		in := anthropic.ToolInputSchemaParam{Properties: schema["properties"]}
		if r, ok := schema["required"].([]any); ok {
			for _, s := range r {
				if s, ok := s.(string); ok {
					in.Required = append(in.Required, s)
				}
			}
		}
		for k, v := range schema {
			if k != "type" && k != "properties" && k != "required" {
				if in.ExtraFields == nil {
					in.ExtraFields = map[string]any{}
				}
				in.ExtraFields[k] = v
			}
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return params, nil
}

func (p *Anthropic) whole(ctx context.Context, params anthropic.MessageNewParams, emit func(Event)) (Response, error) {
	m, err := p.messages.New(ctx, params)
	if err != nil {
		return Response{}, wrap("anthropic", err)
	}
	resp := anthropicResponse(m)
	if resp.Message.Text != "" {
		emit(Event{Text: resp.Message.Text})
	}
	for _, c := range resp.Message.ToolCalls {
		emit(Event{ToolCall: c.Name})
	}
	return resp, nil
}

func (p *Anthropic) stream(ctx context.Context, params anthropic.MessageNewParams, emit func(Event)) (Response, error) {
	s := p.messages.NewStreaming(ctx, params)
	defer s.Close()
	var (
		acc     anthropic.Message
		stopped bool
	)
	for s.Next() {
		ev := s.Current()
		if err := acc.Accumulate(ev); err != nil {
			return Response{}, fmt.Errorf("anthropic: %w: %v", ErrStreamCut, err)
		}
		switch ev.Type {
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				emit(Event{ToolCall: ev.ContentBlock.Name})
			}
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				emit(Event{Text: ev.Delta.Text})
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := s.Err(); err != nil {
		var ae *anthropic.Error
		if errors.As(err, &ae) {
			// An error event mid-stream (overloaded, say): the request was
			// accepted, so asking again is worth it.
			return Response{}, fmt.Errorf("anthropic: %w: %s", ErrStreamCut, redact(ae.Message, p.apiKey))
		}
		return Response{}, wrap("anthropic: stream", err)
	}
	if !stopped {
		return Response{}, fmt.Errorf("anthropic: %w", ErrStreamCut)
	}
	return anthropicResponse(&acc), nil
}

func anthropicResponse(m *anthropic.Message) Response {
	msg := Message{Role: RoleAssistant}
	var text strings.Builder
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := b.Input
			if len(args) == 0 {
				args = json.RawMessage(`{}`)
			}
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Args: append(json.RawMessage(nil), args...)})
		}
	}
	msg.Text = text.String()
	u := m.Usage
	return Response{
		Message: msg,
		Usage: Usage{
			InputTokens:  u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
			OutputTokens: u.OutputTokens,
		},
		Stop: anthropicStop(string(m.StopReason)),
	}
}

func anthropicStop(reason string) string {
	switch reason {
	case "end_turn", "stop_sequence":
		return StopEnd
	case "tool_use":
		return StopToolUse
	case "max_tokens":
		return StopMaxTokens
	}
	return reason
}
