package integration

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"computerd/agentctl/model/modeltest"
	"computerd/computerd/api"
	"computerd/computerd/daemon"
	"computerd/core"
	"computerd/wire"
)

// agentSecret is the model key the agent tests use: it must reach the
// model server's auth header and nowhere else.
const agentSecret = "sk-test-7f3a9c1e-never-leaves-agentctl"

// agentScript is a task in three model turns: two parallel calls (a write
// and a read of a missing file), then an exec that prints, fails, and
// shows its environment, then the final answer.
func agentScript() []modeltest.Step {
	return []modeltest.Step{
		modeltest.ToolCalls(modeltest.Usage{Input: 100, Output: 20},
			modeltest.Call{Name: "write", Args: `{"path": "hello.txt", "content": "hi there\n"}`},
			modeltest.Call{Name: "read", Args: `{"path": "missing.txt"}`}),
		modeltest.ToolCalls(modeltest.Usage{Input: 200, Output: 30},
			modeltest.Call{Name: "exec", Args: `{"command": "cat hello.txt; env; echo to-stderr >&2; echo made > made.txt; exit 3"}`}),
		modeltest.Reply("Done: wrote hello.txt and ran it.", modeltest.Usage{Input: 300, Output: 10}),
	}
}

// TestAgentRun drives a scripted model through both real wire formats:
// every tool call and line of output shows in order, tool errors go back
// to the model with their codes, every step is in the journal, the report
// has the diff stat and the commands, and the key reaches only the model
// server.
func TestAgentRun(t *testing.T) {
	needExec(t)
	for _, provider := range []string{"openai", "anthropic"} {
		t.Run(provider, func(t *testing.T) {
			e, logs := startLogged(t)
			e.ok("ws", "create", "w")
			srv := modeltest.New(t, agentScript()...)
			base := srv.OpenAIURL()
			if provider == "anthropic" {
				base = srv.AnthropicURL()
			}
			t.Setenv("OPENAI_API_KEY", agentSecret)
			t.Setenv("ANTHROPIC_API_KEY", agentSecret)
			out, errs, err := e.run(nil, "agent", "run", "--provider", provider, "--base-url", base, "--model", "gpt-4o-mini", "w", "say hi in a file")
			if err != nil {
				t.Fatalf("agent run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errs)
			}
			// The terminal shows each call, then the command's output, in order.
			for _, want := range []string{"▸ write hello.txt", "▸ read missing.txt", "error (not_found)", "▸ exec cat hello.txt", "hi there", "exit 3", "Done: wrote hello.txt"} {
				i := strings.Index(out, want)
				if i < 0 {
					t.Fatalf("output lacks %q:\n%s", want, out)
				}
				out = out[i+len(want):]
			}
			if !strings.Contains(errs, "to-stderr") {
				t.Errorf("stderr of the command not shown: %q", errs)
			}

			// The journal: six steps, each ended, with their results.
			runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
			if len(runs) != 1 || runs[0].State != core.RunDone || runs[0].Steps != 6 || runs[0].InputTokens != 600 || runs[0].OutputTokens != 60 {
				t.Fatalf("runs %+v", runs)
			}
			if runs[0].Cost <= 0 {
				t.Errorf("cost %v for a priced model", runs[0].Cost)
			}
			detail := decodeJSON[wire.RunDetail](t, e.ok("agent", "show", runs[0].ID, "--json"))
			var kinds []string
			for _, st := range detail.Steps {
				if st.State != core.StepDone {
					t.Errorf("step %d not ended: %+v", st.Seq, st)
				}
				kinds = append(kinds, string(st.Kind)+":"+st.Tool)
			}
			if got, want := strings.Join(kinds, " "), "model: tool:write tool:read model: tool:exec model:"; got != want {
				t.Errorf("steps %s, want %s", got, want)
			}
			if ex := detail.Steps[4]; ex.ExitCode == nil || *ex.ExitCode != 3 || ex.Code != "exit" || ex.ExecID == "" || ex.Rev == 0 {
				t.Errorf("exec step %+v", ex)
			}
			if rd := detail.Steps[2]; !rd.IsError || rd.Code != wire.CodeNotFound {
				t.Errorf("read of a missing file: %+v", rd)
			}
			if got := e.tree("w"); got["hello.txt"] != "hi there\n" || got["made.txt"] != "made\n" {
				t.Errorf("workspace %v", got)
			}

			// The model got both tool results back, the error with its code.
			reqs := srv.Requests()
			if len(reqs) != 3 {
				t.Fatalf("%d model requests, want 3", len(reqs))
			}
			second := string(reqs[1].Body)
			for _, want := range []string{"wrote hello.txt", "not_found"} {
				if !strings.Contains(second, want) {
					t.Errorf("second request lacks %q: %s", want, second)
				}
			}
			for _, r := range reqs {
				auth := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
				if !strings.Contains(auth, agentSecret) {
					t.Errorf("model request without the key in its auth header: %v", r.Header)
				}
				if bytes.Contains(r.Body, []byte(agentSecret)) {
					t.Errorf("the key is in a model request's body")
				}
			}

			// The report: what changed and every command with its exit code.
			report := e.ok("agent", "show", runs[0].ID, "--report")
			for _, want := range []string{"### Changes", "hello.txt", "made.txt", "### Commands", "| `cat hello.txt; env;", "| 3 |", "Done: wrote hello.txt"} {
				if !strings.Contains(report, want) {
					t.Errorf("report lacks %q:\n%s", want, report)
				}
			}

			// The key is nowhere in computerd: not in the sandbox's
			// environment (the exec printed it), not in its data directory.
			if strings.Contains(detail.Steps[4].Text, agentSecret) {
				t.Errorf("the key reached the sandbox's environment")
			}
			assertNotInDir(t, e.dir, agentSecret)
			if logs.Len() == 0 || strings.Contains(logs.String(), agentSecret) {
				t.Errorf("computerd's log (%d bytes) is empty or holds the key", logs.Len())
			}
		})
	}
}

// TestAgentToolErrorsAndLimits: a model that calls an unknown tool with
// bad JSON gets errors back and the run goes on; --max-steps ends a run as
// limited; a model that fails for good ends it as failed.
func TestAgentToolErrorsAndLimits(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	t.Setenv("OPENAI_API_KEY", agentSecret)
	srv := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{Input: 1, Output: 1},
			modeltest.Call{Name: "rm_rf", Args: `{}`},
			modeltest.Call{Name: "ls", Args: `{"path": `}),
		modeltest.ToolCalls(modeltest.Usage{Input: 1, Output: 1}, modeltest.Call{Name: "ls", Args: `{}`}),
	)
	out, errs, err := e.run(nil, "agent", "run", "--base-url", srv.OpenAIURL(), "--max-steps", "2", "w", "look around")
	if err == nil {
		t.Fatalf("a limited run exits 0:\n%s", out)
	}
	runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	if len(runs) != 1 || runs[0].State != core.RunLimited || !strings.Contains(runs[0].Error, "max-steps 2") {
		t.Fatalf("runs %+v\n%s\n%s", runs, out, errs)
	}
	detail := decodeJSON[wire.RunDetail](t, e.ok("agent", "show", runs[0].ID, "--json"))
	if st := detail.Steps[1]; st.Tool != "rm_rf" || !st.IsError || st.Code != wire.CodeNotFound {
		t.Errorf("unknown tool: %+v", st)
	}
	if st := detail.Steps[2]; !st.IsError || st.Code != wire.CodeInvalid {
		t.Errorf("bad JSON arguments: %+v", st)
	}

	// A model that refuses: the run is interrupted (a resume with a good
	// key goes on), the error recorded.
	srv2 := modeltest.New(t, modeltest.Fail(401, "bad key"))
	if _, _, err := e.run(nil, "agent", "run", "--base-url", srv2.OpenAIURL(), "w", "anything"); err == nil {
		t.Fatal("a run whose model refuses exits 0")
	}
	runs = decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	if runs[0].State != core.RunInterrupted || !strings.Contains(runs[0].Error, "401") {
		t.Errorf("interrupted run %+v", runs[0])
	}
	if len(srv2.Requests()) != 1 {
		t.Errorf("a 401 was asked %d times, want once", len(srv2.Requests()))
	}
}

// TestAgentMemoryAndSkills: memories go into a new run's first prompt; a
// skill saved from a run lists its successful commands and runs as a new
// run that is told the procedure.
func TestAgentMemoryAndSkills(t *testing.T) {
	needExec(t)
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	t.Setenv("OPENAI_API_KEY", agentSecret)
	e.ok("memory", "add", "the tests run with make check")
	srv := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{}, modeltest.Call{Name: "exec", Args: `{"command": "echo built > out.txt"}`}),
		modeltest.Reply("built it", modeltest.Usage{}),
	)
	e.ok("agent", "run", "--base-url", srv.OpenAIURL(), "w", "build it")
	if first := string(srv.Requests()[0].Body); !strings.Contains(first, "the tests run with make check") || !strings.Contains(first, "build it") {
		t.Errorf("first prompt lacks the memory or the task: %s", first)
	}
	runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	e.ok("skill", "save", "build", "--from-run", runs[0].ID)
	if body := e.ok("skill", "show", "build"); !strings.Contains(body, "1. echo built > out.txt") {
		t.Errorf("skill from the run:\n%s", body)
	}
	srv.Add(modeltest.Reply("followed it", modeltest.Usage{}))
	e.ok("skill", "run", "--base-url", srv.OpenAIURL(), "w", "build")
	reqs := srv.Requests()
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "echo built > out.txt") || !strings.Contains(last, `skill \"build\"`) {
		t.Errorf("skill run's prompt lacks the procedure: %s", last)
	}
	if got := decodeJSON[[]core.Memory](t, e.ok("memory", "ls", "--json")); len(got) != 1 {
		t.Errorf("memories %v", got)
	}
}

// decodeJSON parses agentctl's --json output.
func decodeJSON[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, out)
	}
	return v
}

// assertNotInDir fails if any file under dir holds secret.
func assertNotInDir(t *testing.T, dir, secret string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the model key", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAgentModelRetries: a 429 and a stream cut mid-answer are asked
// again, shown as they happen, and leave one model step in the journal;
// --max-cost ends the run once a turn's cost reaches it.
func TestAgentModelRetries(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	t.Setenv("OPENAI_API_KEY", agentSecret)
	srv := modeltest.New(t,
		modeltest.Step{Status: 429, Message: "slow down", RetryAfter: "0"},
		modeltest.Step{Text: "a long answer that will be cut", CutAfter: 3},
		modeltest.ToolCalls(modeltest.Usage{Input: 100000, Output: 1000}, modeltest.Call{Name: "ls", Args: `{}`}),
		modeltest.Reply("never asked", modeltest.Usage{}),
	)
	out, errs, err := e.run(nil, "agent", "run", "--base-url", srv.OpenAIURL(), "--model", "gpt-4o-mini", "--max-cost", "0.001", "w", "look")
	if err == nil {
		t.Fatalf("a run stopped at its cost limit exits 0:\n%s", out)
	}
	if n := strings.Count(errs, "model: "); n != 2 {
		t.Errorf("%d retries shown, want 2:\n%s", n, errs)
	}
	runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	if r := runs[0]; r.State != core.RunLimited || !strings.Contains(r.Error, "max-cost") || r.Steps != 2 || r.Cost < 0.001 {
		t.Errorf("run %+v", r)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3 (two retried, then the answer)", n)
	}
}

// startLogged is start with computerd's log, at debug level, kept.
func startLogged(t *testing.T) (*env, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	e := startWith(t, daemon.Config{Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	return e, logs
}

// syncBuffer is a bytes.Buffer many goroutines may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// TestAgentTokenAndTimeLimits: --max-tokens ends a run once its turns have
// used that many tokens; --timeout ends it once it has run that long.
func TestAgentTokenAndTimeLimits(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	t.Setenv("OPENAI_API_KEY", agentSecret)
	srv := modeltest.New(t,
		modeltest.ToolCalls(modeltest.Usage{Input: 900, Output: 100}, modeltest.Call{Name: "ls", Args: `{}`}),
		modeltest.Reply("never asked", modeltest.Usage{}),
	)
	if _, _, err := e.run(nil, "agent", "run", "--base-url", srv.OpenAIURL(), "--max-tokens", "1000", "w", "look"); err == nil {
		t.Fatal("a run stopped at its token limit exits 0")
	}
	if len(srv.Requests()) != 1 {
		t.Errorf("%d model requests, want 1", len(srv.Requests()))
	}
	srv2 := modeltest.New(t, modeltest.Reply("never asked", modeltest.Usage{}))
	if _, _, err := e.run(nil, "agent", "run", "--base-url", srv2.OpenAIURL(), "--timeout", "1ns", "w", "look"); err == nil {
		t.Fatal("a run past its timeout exits 0")
	}
	if len(srv2.Requests()) != 0 {
		t.Errorf("a run past its timeout asked the model %d times", len(srv2.Requests()))
	}
	runs := decodeJSON[[]core.Run](t, e.ok("agent", "ls", "w", "--json"))
	if len(runs) != 2 {
		t.Fatalf("runs %+v", runs)
	}
	for _, r := range runs {
		if r.State != core.RunLimited {
			t.Errorf("run %s: %s (%s), want limited", r.Task, r.State, r.Error)
		}
	}
	if !strings.Contains(runs[0].Error, "timeout") || !strings.Contains(runs[1].Error, "max-tokens") {
		t.Errorf("limits recorded: %q, %q", runs[0].Error, runs[1].Error)
	}
}
