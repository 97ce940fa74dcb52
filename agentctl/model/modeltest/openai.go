package modeltest

import (
	"fmt"
	"net/http"
)

// openAIWire is OpenAI's Chat Completions format.
type openAIWire struct{}

func (openAIWire) errorBody(status int, message string) any {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_exceeded"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status >= 500:
		typ = "server_error"
	}
	return map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": nil}}
}

func callID(prefix, id string, i int, c Call) string {
	if c.ID != "" {
		return c.ID
	}
	return fmt.Sprintf("%s%s_%d", prefix, id, i)
}

func (openAIWire) finish(st Step) string {
	switch {
	case st.Stop != "":
		return st.Stop
	case len(st.Calls) > 0:
		return "tool_calls"
	}
	return "stop"
}

func (openAIWire) usage(st Step) map[string]any {
	return map[string]any{
		"prompt_tokens":     st.Usage.Input,
		"completion_tokens": st.Usage.Output,
		"total_tokens":      st.Usage.Input + st.Usage.Output,
	}
}

func (w openAIWire) whole(id, model string, st Step) any {
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if st.Text != "" {
		msg["content"] = st.Text
	}
	var calls []any
	for i, c := range st.Calls {
		calls = append(calls, map[string]any{
			"id":       callID("call_", id, i, c),
			"type":     "function",
			"function": map[string]any{"name": c.Name, "arguments": c.Args},
		})
	}
	if calls != nil {
		msg["tool_calls"] = calls
	}
	return map[string]any{
		"id":      "chatcmpl-" + id,
		"object":  "chat.completion",
		"created": 1764633600,
		"model":   model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": w.finish(st)}},
		"usage":   w.usage(st),
	}
}

func (w openAIWire) events(id, model string, st Step, usage bool) []string {
	chunk := func(delta map[string]any, finish any) string {
		return sse("", map[string]any{
			"id":      "chatcmpl-" + id,
			"object":  "chat.completion.chunk",
			"created": 1764633600,
			"model":   model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		})
	}
	out := []string{chunk(map[string]any{"role": "assistant", "content": ""}, nil)}
	for _, p := range pieces(st.Text, st.Piece) {
		out = append(out, chunk(map[string]any{"content": p}, nil))
	}
	// Each call opens with its id and name, then its arguments follow in
	// pieces, addressed by index as OpenAI does.
	for i, c := range st.Calls {
		if st.WholeCalls {
			out = append(out, chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": 0, "id": callID("call_", id, i, c), "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Args},
			}}}, nil))
			continue
		}
		out = append(out, chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": callID("call_", id, i, c), "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""},
		}}}, nil))
		for _, p := range pieces(c.Args, st.Piece) {
			out = append(out, chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": p},
			}}}, nil))
		}
	}
	out = append(out, chunk(map[string]any{}, w.finish(st)))
	if usage {
		out = append(out, sse("", map[string]any{
			"id":      "chatcmpl-" + id,
			"object":  "chat.completion.chunk",
			"created": 1764633600,
			"model":   model,
			"choices": []any{},
			"usage":   w.usage(st),
		}))
	}
	return append(out, "data: [DONE]\n\n")
}

func (openAIWire) streamError(message string) string {
	return sse("", map[string]any{"error": map[string]any{"message": message, "type": "server_error", "param": nil, "code": nil}})
}
