package model_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"computerd/agentctl/model"
	"computerd/agentctl/model/modeltest"
)

// TestWholeCallsAtOneIndex: some OpenAI-compatible servers send each call
// whole, every one at index 0; their ids keep them apart.
func TestWholeCallsAtOneIndex(t *testing.T) {
	step := modeltest.ToolCalls(modeltest.Usage{},
		modeltest.Call{ID: "a", Name: "read", Args: `{"path":"a"}`},
		modeltest.Call{ID: "b", Name: "ls", Args: `{}`},
	)
	step.WholeCalls = true
	srv := modeltest.New(t, step)
	resp, err := mustProvider(t, providers[0], srv, false).Complete(context.Background(), ask("go"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range resp.Message.ToolCalls {
		got = append(got, c.ID+" "+c.Name+" "+string(c.Args))
	}
	want := []string{`a read {"path":"a"}`, `b ls {}`}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("calls = %q, want %q", got, want)
	}
}

// TestErrorBodies: the server's message is found in the error bodies that
// OpenAI-compatible servers send.
func TestErrorBodies(t *testing.T) {
	tests := []struct {
		name, body, wantType, wantMessage string
	}{
		{"openai", `{"error":{"message":"bad model","type":"invalid_request_error","param":null,"code":"model_not_found"}}`, "invalid_request_error", "bad model"},
		{"code only", `{"error":{"message":"bad model","code":"model_not_found"}}`, "model_not_found", "bad model"},
		{"ollama", `{"error":"model \"llama9\" not found, try pulling it first"}`, "", `model "llama9" not found, try pulling it first`},
		{"vllm", `{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`, "BadRequestError", "max_tokens is too large"},
		{"fastapi", `{"detail":"Not Found"}`, "", "Not Found"},
		{"text", "upstream connect error\n", "", "upstream connect error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			prov := model.NewOpenAI(model.Config{BaseURL: srv.URL + "/v1"})
			_, err := prov.Complete(context.Background(), ask("hi"), nil)
			var se *model.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("error = %v, want a *model.StatusError", err)
			}
			if se.Status != http.StatusBadRequest || se.Type != tt.wantType || se.Message != tt.wantMessage {
				t.Errorf("error = %d %q %q, want 400 %q %q", se.Status, se.Type, se.Message, tt.wantType, tt.wantMessage)
			}
		})
	}
}
