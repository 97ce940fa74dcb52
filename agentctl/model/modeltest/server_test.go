package modeltest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"computerd/agentctl/model/modeltest"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// events reads a server-sent event stream into its event names and data lines.
func events(t *testing.T, r io.Reader) (names, data []string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			names = append(names, strings.TrimPrefix(line, "event: "))
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	return names, data
}

func TestOpenAIStream(t *testing.T) {
	step := modeltest.ToolCalls(modeltest.Usage{Input: 3, Output: 4}, modeltest.Call{ID: "c1", Name: "ls", Args: `{"p":"."}`})
	step.Text = "hi there"
	srv := modeltest.New(t, step)
	res := post(t, srv.OpenAIURL()+"/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	if got, want := res.Header.Get("Content-Type"), "text/event-stream"; got != want {
		t.Errorf("content type = %q, want %q", got, want)
	}
	_, data := events(t, res.Body)
	if got, want := data[len(data)-1], "[DONE]"; got != want {
		t.Errorf("last data = %q, want %q", got, want)
	}
	var text, args strings.Builder
	var finish string
	var usage struct{ PromptTokens, CompletionTokens int64 }
	for _, d := range data[:len(data)-1] {
		var c struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Index    int `json:"index"`
						Function struct {
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			for _, tc := range ch.Delta.ToolCalls {
				args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			usage.PromptTokens, usage.CompletionTokens = c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
	}
	if text.String() != "hi there" || args.String() != `{"p":"."}` || finish != "tool_calls" || usage.PromptTokens != 3 || usage.CompletionTokens != 4 {
		t.Errorf("text %q, args %q, finish %q, usage %+v", text.String(), args.String(), finish, usage)
	}
	if reqs := srv.Requests(); len(reqs) != 1 || !reqs[0].Stream || reqs[0].Path != "/v1/chat/completions" {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestAnthropicStream(t *testing.T) {
	step := modeltest.ToolCalls(modeltest.Usage{Input: 3, Output: 4}, modeltest.Call{ID: "t1", Name: "ls", Args: `{"p":"."}`})
	step.Text = "hi"
	srv := modeltest.New(t, step)
	res := post(t, srv.AnthropicURL()+"/v1/messages", `{"model":"m","stream":true,"max_tokens":10,"messages":[]}`)
	names, _ := events(t, res.Body)
	want := []string{
		"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("events =\n%q\nwant\n%q", names, want)
	}
}

func TestErrorFormats(t *testing.T) {
	tests := []struct {
		name, path, wantType string
	}{
		{"openai", "/v1/chat/completions", "rate_limit_exceeded"},
		{"anthropic", "/v1/messages", "rate_limit_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			step := modeltest.Fail(http.StatusTooManyRequests, "slow down")
			step.RetryAfter = "7"
			srv := modeltest.New(t, step)
			res := post(t, srv.URL+tt.path, `{"model":"m"}`)
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "7" {
				t.Errorf("status %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
			}
			var body struct {
				Error struct{ Type, Message string } `json:"error"`
			}
			if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if got, want := body.Error, (struct{ Type, Message string }{tt.wantType, "slow down"}); got != want {
				t.Errorf("error = %+v, want %+v", got, want)
			}
		})
	}
}

func TestAddAndLeft(t *testing.T) {
	srv := modeltest.New(t, modeltest.Reply("one", modeltest.Usage{}))
	srv.Add(modeltest.Reply("two", modeltest.Usage{}))
	if got, want := srv.Left(), 2; got != want {
		t.Fatalf("left = %d, want %d", got, want)
	}
	for _, want := range []string{"one", "two"} {
		res := post(t, srv.AnthropicURL()+"/v1/messages", `{"model":"m","max_tokens":1,"messages":[]}`)
		var m struct {
			Content []struct{ Text string } `json:"content"`
		}
		if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if len(m.Content) != 1 || m.Content[0].Text != want {
			t.Errorf("content = %+v, want %q", m.Content, want)
		}
	}
	if got := srv.Left(); got != 0 {
		t.Errorf("left = %d, want 0", got)
	}
}
