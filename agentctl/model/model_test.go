package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"computerd/agentctl/model"
	"computerd/agentctl/model/modeltest"
)

const testKey = "sk-test-0123456789abcdef"

// provider is one implementation under test and where it finds the server.
type provider struct {
	name string
	new  func(model.Config) model.Provider
	url  func(*modeltest.Server) string
}

var providers = []provider{
	{"openai", func(c model.Config) model.Provider { return model.NewOpenAI(c) }, (*modeltest.Server).OpenAIURL},
	{"anthropic", func(c model.Config) model.Provider { return model.NewAnthropic(c) }, (*modeltest.Server).AnthropicURL},
}

// modes are streamed and whole answers.
var modes = []struct {
	name     string
	noStream bool
}{{"stream", false}, {"whole", true}}

// mustProvider returns p talking to srv with tiny retry delays.
func mustProvider(tb testing.TB, p provider, srv *modeltest.Server, noStream bool, edit ...func(*model.Config)) model.Provider {
	tb.Helper()
	cfg := model.Config{BaseURL: p.url(srv), APIKey: testKey, NoStream: noStream, RetryBase: time.Millisecond}
	for _, e := range edit {
		e(&cfg)
	}
	return p.new(cfg)
}

// recorder keeps the progress events of one Complete.
type recorder struct{ events []model.Event }

func (r *recorder) progress(e model.Event) { r.events = append(r.events, e) }

func (r *recorder) texts() (out []string) {
	for _, e := range r.events {
		if e.Text != "" {
			out = append(out, e.Text)
		}
	}
	return out
}

func (r *recorder) calls() (out []string) {
	for _, e := range r.events {
		if e.ToolCall != "" {
			out = append(out, e.ToolCall)
		}
	}
	return out
}

func (r *recorder) retries() (out []model.Event) {
	for _, e := range r.events {
		if e.Retry != nil {
			out = append(out, e)
		}
	}
	return out
}

func ask(text string) model.Request {
	return model.Request{Model: "test-model", Messages: []model.Message{{Role: model.RoleUser, Text: text}}}
}

func TestText(t *testing.T) {
	const text = "Hello, world: this answer arrives in many small pieces."
	for _, p := range providers {
		for _, m := range modes {
			t.Run(p.name+"/"+m.name, func(t *testing.T) {
				srv := modeltest.New(t, modeltest.Reply(text, modeltest.Usage{Input: 120, Output: 17}))
				var rec recorder
				resp, err := mustProvider(t, p, srv, m.noStream).Complete(context.Background(), ask("hi"), rec.progress)
				if err != nil {
					t.Fatal(err)
				}
				got, want := resp, model.Response{
					Message: model.Message{Role: model.RoleAssistant, Text: text},
					Usage:   model.Usage{InputTokens: 120, OutputTokens: 17},
					Stop:    model.StopEnd,
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("response = %+v, want %+v", got, want)
				}
				deltas := rec.texts()
				if got, want := strings.Join(deltas, ""), text; got != want {
					t.Errorf("deltas joined = %q, want %q", got, want)
				}
				if wantMany := !m.noStream; (len(deltas) > 1) != wantMany {
					t.Errorf("%d deltas, want many: %v", len(deltas), wantMany)
				}
				reqs := srv.Requests()
				if len(reqs) != 1 {
					t.Fatalf("%d requests, want 1", len(reqs))
				}
				if got, want := reqs[0].Stream, !m.noStream; got != want {
					t.Errorf("request stream = %v, want %v", got, want)
				}
			})
		}
	}
}

func TestToolCalls(t *testing.T) {
	long := `{"path":"src/main.go","old":"fmt.Println(\"hello\")","new":"fmt.Println(\"goodbye\")","all":true}`
	tests := []struct {
		name  string
		text  string
		calls []modeltest.Call
	}{
		{"one", "", []modeltest.Call{{ID: "c1", Name: "read", Args: `{"path":"README.md"}`}}},
		{"parallel", "Let me look.", []modeltest.Call{
			{ID: "c1", Name: "read", Args: `{"path":"a.txt"}`},
			{ID: "c2", Name: "edit", Args: long},
			{ID: "c3", Name: "exec", Args: `{"argv":["go","test","./..."]}`},
		}},
		{"no arguments", "", []modeltest.Call{{ID: "c1", Name: "ls", Args: ""}}},
	}
	for _, p := range providers {
		for _, m := range modes {
			for _, tt := range tests {
				t.Run(p.name+"/"+m.name+"/"+tt.name, func(t *testing.T) {
					step := modeltest.ToolCalls(modeltest.Usage{Input: 50, Output: 30}, tt.calls...)
					step.Text = tt.text
					step.Piece = 2 // arguments in many chunks
					srv := modeltest.New(t, step)
					var rec recorder
					resp, err := mustProvider(t, p, srv, m.noStream).Complete(context.Background(), ask("go"), rec.progress)
					if err != nil {
						t.Fatal(err)
					}
					if got, want := resp.Message.Text, tt.text; got != want {
						t.Errorf("text = %q, want %q", got, want)
					}
					if got, want := resp.Stop, model.StopToolUse; got != want {
						t.Errorf("stop = %q, want %q", got, want)
					}
					var names []string
					if len(resp.Message.ToolCalls) != len(tt.calls) {
						t.Fatalf("%d tool calls, want %d: %+v", len(resp.Message.ToolCalls), len(tt.calls), resp.Message.ToolCalls)
					}
					for i, got := range resp.Message.ToolCalls {
						want := tt.calls[i]
						names = append(names, want.Name)
						if got.ID != want.ID || got.Name != want.Name {
							t.Errorf("call %d = %s %s, want %s %s", i, got.ID, got.Name, want.ID, want.Name)
						}
						wantArgs := want.Args
						if wantArgs == "" {
							wantArgs = "{}"
						}
						if !jsonEqual(t, got.Args, []byte(wantArgs)) {
							t.Errorf("call %d args = %s, want %s", i, got.Args, wantArgs)
						}
					}
					if got, want := rec.calls(), names; !reflect.DeepEqual(got, want) {
						t.Errorf("tool call events = %q, want %q", got, want)
					}
				})
			}
		}
	}
}

func jsonEqual(tb testing.TB, a, b []byte) bool {
	tb.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		tb.Errorf("invalid JSON %s: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		tb.Errorf("invalid JSON %s: %v", b, err)
		return false
	}
	return reflect.DeepEqual(x, y)
}

func TestRetried(t *testing.T) {
	const text = "the whole answer, at last"
	ok := modeltest.Reply(text, modeltest.Usage{Input: 10, Output: 5})
	rateLimited := modeltest.Fail(http.StatusTooManyRequests, "slow down")
	rateLimited.RetryAfter = "1"
	cut := modeltest.Reply("a partial answer that never ends", modeltest.Usage{Input: 10, Output: 5})
	cut.CutAfter = 6
	endEarly := cut
	endEarly.EndEarly = true
	overloaded := cut
	overloaded.StreamError = "Overloaded"
	bodyCut := cut
	bodyCut.CutAfter = 40
	tests := []struct {
		name     string
		noStream bool
		first    modeltest.Step
		minWait  time.Duration
	}{
		{"429 with Retry-After", false, rateLimited, time.Second},
		{"500", false, modeltest.Fail(http.StatusInternalServerError, "boom"), 0},
		{"503 answering whole", true, modeltest.Fail(http.StatusServiceUnavailable, "busy"), 0},
		{"stream cut", false, cut, 0},
		{"stream ends early", false, endEarly, 0},
		{"error event mid-stream", false, overloaded, 0},
		{"body cut", true, bodyCut, 0},
	}
	for _, p := range providers {
		for _, tt := range tests {
			t.Run(p.name+"/"+tt.name, func(t *testing.T) {
				srv := modeltest.New(t, tt.first, ok)
				var rec recorder
				start := time.Now()
				resp, err := mustProvider(t, p, srv, tt.noStream).Complete(context.Background(), ask("hi"), rec.progress)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := resp.Message.Text, text; got != want {
					t.Errorf("text = %q, want %q (the partial answer must go)", got, want)
				}
				if got, want := resp.Retries, 1; got != want {
					t.Errorf("retries = %d, want %d", got, want)
				}
				if got, want := len(srv.Requests()), 2; got != want {
					t.Errorf("%d requests, want %d", got, want)
				}
				retries := rec.retries()
				if len(retries) != 1 {
					t.Fatalf("%d retry events, want 1", len(retries))
				}
				if tt.minWait > 0 {
					if got := retries[0].RetryIn; got != tt.minWait {
						t.Errorf("retry in %v, want the server's %v", got, tt.minWait)
					}
					if got := time.Since(start); got < tt.minWait-50*time.Millisecond {
						t.Errorf("retried after %v, want at least %v", got, tt.minWait)
					}
				}
				// The last retry event ends what was streamed before it:
				// the deltas after it are the answer.
				var after []string
				for _, e := range rec.events {
					if e.Retry != nil {
						after = nil
					} else if e.Text != "" {
						after = append(after, e.Text)
					}
				}
				if got, want := strings.Join(after, ""), text; got != want {
					t.Errorf("deltas after the retry = %q, want %q", got, want)
				}
			})
		}
	}
}

func TestNotRetried(t *testing.T) {
	tests := []struct {
		status  int
		message string
	}{
		{http.StatusBadRequest, "messages: field required"},
		{http.StatusUnauthorized, "Incorrect API key provided: " + testKey},
		{http.StatusNotFound, "model not found"},
	}
	for _, p := range providers {
		for _, tt := range tests {
			t.Run(p.name+"/"+http.StatusText(tt.status), func(t *testing.T) {
				srv := modeltest.New(t, modeltest.Fail(tt.status, tt.message))
				var rec recorder
				_, err := mustProvider(t, p, srv, false).Complete(context.Background(), ask("hi"), rec.progress)
				var se *model.StatusError
				if !errors.As(err, &se) {
					t.Fatalf("error = %v, want a *model.StatusError", err)
				}
				if got, want := se.Status, tt.status; got != want {
					t.Errorf("status = %d, want %d", got, want)
				}
				if got, want := se.Provider, p.name; got != want {
					t.Errorf("provider = %q, want %q", got, want)
				}
				wantMsg := strings.ReplaceAll(tt.message, testKey, "[redacted]")
				if got := se.Message; got != wantMsg {
					t.Errorf("message = %q, want %q", got, wantMsg)
				}
				if strings.Contains(err.Error(), testKey) {
					t.Errorf("error shows the API key: %v", err)
				}
				if got := len(srv.Requests()); got != 1 {
					t.Errorf("%d requests, want 1", got)
				}
				if got := rec.retries(); len(got) != 0 {
					t.Errorf("retry events %v, want none", got)
				}
			})
		}
	}
}

func TestRetriesRunOut(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			srv := modeltest.New(t,
				modeltest.Fail(http.StatusInternalServerError, "one"),
				modeltest.Fail(http.StatusBadGateway, "two"),
				modeltest.Fail(http.StatusServiceUnavailable, "three"),
			)
			var rec recorder
			prov := mustProvider(t, p, srv, false, func(c *model.Config) { c.MaxRetries = 2 })
			_, err := prov.Complete(context.Background(), ask("hi"), rec.progress)
			var se *model.StatusError
			if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || se.Message != "three" {
				t.Fatalf("error = %v, want the last answer, 503 three", err)
			}
			if got, want := len(srv.Requests()), 3; got != want {
				t.Errorf("%d requests, want %d", got, want)
			}
			if got, want := len(rec.retries()), 2; got != want {
				t.Errorf("%d retry events, want %d", got, want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	srv := modeltest.New(t,
		modeltest.Fail(http.StatusInternalServerError, "one"),
		modeltest.Fail(http.StatusInternalServerError, "two"),
		modeltest.Fail(http.StatusInternalServerError, "three"),
		modeltest.Reply("ok", modeltest.Usage{}),
	)
	var rec recorder
	prov := mustProvider(t, providers[0], srv, false, func(c *model.Config) { c.RetryBase = 2 * time.Millisecond })
	if _, err := prov.Complete(context.Background(), ask("hi"), rec.progress); err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for _, e := range rec.retries() {
		got = append(got, e.RetryIn)
	}
	if want := []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond}; !reflect.DeepEqual(got, want) {
		t.Errorf("delays = %v, want %v", got, want)
	}
}

func TestCancelDuringRetry(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			st := modeltest.Fail(http.StatusTooManyRequests, "later")
			st.RetryAfter = "30"
			srv := modeltest.New(t, st)
			ctx, cancel := context.WithCancel(context.Background())
			prov := mustProvider(t, p, srv, false)
			_, err := prov.Complete(ctx, ask("hi"), func(e model.Event) {
				if e.Retry != nil {
					cancel()
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error = %v, want context.Canceled", err)
			}
		})
	}
}

func TestAPIKeyOnlyInItsHeader(t *testing.T) {
	// Keys and URLs in the environment are the caller's to read, never the provider's.
	t.Setenv("OPENAI_API_KEY", "sk-from-env-openai")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "token-from-env")
	header := map[string]struct{ name, value string }{
		"openai":    {"Authorization", "Bearer " + testKey},
		"anthropic": {"X-Api-Key", testKey},
	}
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			srv := modeltest.New(t, modeltest.Reply("ok", modeltest.Usage{}))
			if _, err := mustProvider(t, p, srv, false).Complete(context.Background(), ask("hi"), nil); err != nil {
				t.Fatal(err)
			}
			r := srv.Requests()[0]
			want := header[p.name]
			if got := r.Header.Get(want.name); got != want.value {
				t.Errorf("%s = %q, want %q", want.name, got, want.value)
			}
			for name, values := range r.Header {
				for _, v := range values {
					if strings.Contains(v, "from-env") {
						t.Errorf("header %s = %q comes from the environment", name, v)
					}
					if strings.Contains(v, testKey) && http.CanonicalHeaderKey(name) != want.name {
						t.Errorf("header %s carries the API key", name)
					}
				}
			}
			if strings.Contains(string(r.Body), testKey) {
				t.Errorf("body carries the API key")
			}
		})
	}
}

func TestNoMessages(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			srv := modeltest.New(t)
			_, err := mustProvider(t, p, srv, false).Complete(context.Background(), model.Request{Model: "m"}, nil)
			if !errors.Is(err, model.ErrNoMessages) {
				t.Errorf("error = %v, want ErrNoMessages", err)
			}
		})
	}
}

func TestUsageAndCost(t *testing.T) {
	names := map[string]string{"openai": "gpt-4o-2024-08-06", "anthropic": "claude-sonnet-4-20250514"}
	want := map[string]float64{"openai": 2.5*2 + 10*0.5, "anthropic": 3*2 + 15*0.5}
	for _, p := range providers {
		for _, m := range modes {
			t.Run(p.name+"/"+m.name, func(t *testing.T) {
				srv := modeltest.New(t, modeltest.Reply("ok", modeltest.Usage{Input: 2_000_000, Output: 500_000}))
				req := ask("hi")
				req.Model = names[p.name]
				resp, err := mustProvider(t, p, srv, m.noStream).Complete(context.Background(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := resp.Usage, (model.Usage{InputTokens: 2_000_000, OutputTokens: 500_000}); got != want {
					t.Errorf("usage = %+v, want %+v", got, want)
				}
				got, known := model.Cost(req.Model, resp.Usage, nil)
				if !known || got != want[p.name] {
					t.Errorf("cost = %v, %v; want %v, true", got, known, want[p.name])
				}
			})
		}
	}
}

// TestToolRoundTrip sends an answer's tool calls back with their results,
// as an agent loop does, and checks the second request carries them.
func TestToolRoundTrip(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			srv := modeltest.New(t,
				modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "read", Args: `{"path":"a"}`}, modeltest.Call{Name: "read", Args: `{"path":"b"}`}),
				modeltest.Reply("a and b differ", modeltest.Usage{}),
			)
			prov := mustProvider(t, p, srv, false)
			req := ask("compare a and b")
			resp, err := prov.Complete(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Messages = append(req.Messages, resp.Message)
			for _, c := range resp.Message.ToolCalls {
				req.Messages = append(req.Messages, model.Message{Role: model.RoleTool, ToolCallID: c.ID, Text: "contents of " + string(c.Args)})
			}
			resp2, err := prov.Complete(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resp2.Message.Text, "a and b differ"; got != want {
				t.Errorf("text = %q, want %q", got, want)
			}
			second := string(srv.Requests()[1].Body)
			for _, c := range resp.Message.ToolCalls {
				if c.ID == "" || !strings.Contains(second, `"`+c.ID+`"`) {
					t.Errorf("second request lacks call id %q: %s", c.ID, second)
				}
			}
			if !strings.Contains(second, `contents of {\"path\":\"b\"}`) {
				t.Errorf("second request lacks the result for b: %s", second)
			}
		})
	}
}

func TestRetryAfterBeyondCap(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			st := modeltest.Fail(http.StatusTooManyRequests, "come back in an hour")
			st.RetryAfter = "3600"
			srv := modeltest.New(t, st)
			var rec recorder
			_, err := mustProvider(t, p, srv, false).Complete(context.Background(), ask("hi"), rec.progress)
			var se *model.StatusError
			if !errors.As(err, &se) || se.Status != http.StatusTooManyRequests || se.RetryAfter != time.Hour {
				t.Fatalf("error = %v, want 429 with RetryAfter 1h", err)
			}
			if got := len(srv.Requests()); got != 1 {
				t.Errorf("%d requests, want 1", got)
			}
			if got := rec.retries(); len(got) != 0 {
				t.Errorf("retry events %v, want none", got)
			}
		})
	}
}
