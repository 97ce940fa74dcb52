package modeltest

import (
	"encoding/json"
	"net/http"
)

// anthropicWire is Anthropic's Messages format.
type anthropicWire struct{}

func (anthropicWire) errorBody(status int, message string) any {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == 529:
		typ = "overloaded_error"
	case status >= 500:
		typ = "api_error"
	}
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}}
}

func (anthropicWire) stop(st Step) string {
	switch {
	case st.Stop != "":
		return st.Stop
	case len(st.Calls) > 0:
		return "tool_use"
	}
	return "end_turn"
}

// input is a call's arguments as a JSON value; invalid JSON goes as a string.
func input(args string) any {
	if args == "" {
		return map[string]any{}
	}
	var v any
	if json.Unmarshal([]byte(args), &v) != nil {
		return args
	}
	return v
}

func (w anthropicWire) whole(id, model string, st Step) any {
	var content []any
	if st.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": st.Text})
	}
	for i, c := range st.Calls {
		content = append(content, map[string]any{"type": "tool_use", "id": callID("toolu_", id, i, c), "name": c.Name, "input": input(c.Args)})
	}
	if content == nil {
		content = []any{}
	}
	return map[string]any{
		"id":            "msg_" + id,
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   w.stop(st),
		"stop_sequence": nil,
		"usage":         map[string]any{"input_tokens": st.Usage.Input, "output_tokens": st.Usage.Output},
	}
}

func (w anthropicWire) events(id, model string, st Step, _ bool) []string {
	out := []string{
		sse("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": "msg_" + id, "type": "message", "role": "assistant", "model": model,
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": st.Usage.Input, "output_tokens": 1},
		}}),
		sse("ping", map[string]any{"type": "ping"}),
	}
	index := 0
	if st.Text != "" {
		out = append(out, sse("content_block_start", map[string]any{
			"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""},
		}))
		for _, p := range pieces(st.Text, st.Piece) {
			out = append(out, sse("content_block_delta", map[string]any{
				"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": p},
			}))
		}
		out = append(out, sse("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}))
		index++
	}
	for i, c := range st.Calls {
		out = append(out, sse("content_block_start", map[string]any{
			"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "tool_use", "id": callID("toolu_", id, i, c), "name": c.Name, "input": map[string]any{}},
		}))
		for _, p := range pieces(c.Args, st.Piece) {
			out = append(out, sse("content_block_delta", map[string]any{
				"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": p},
			}))
		}
		out = append(out, sse("content_block_stop", map[string]any{"type": "content_block_stop", "index": index}))
		index++
	}
	return append(out,
		sse("message_delta", map[string]any{
			"type":  "message_delta",
			"delta": map[string]any{"stop_reason": w.stop(st), "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": st.Usage.Output},
		}),
		sse("message_stop", map[string]any{"type": "message_stop"}),
	)
}

func (anthropicWire) streamError(message string) string {
	return sse("error", map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": message}})
}
