// Package tools defines the tools a model drives a workspace with: their
// names, JSON schemas and descriptions, and handlers that call computerd's
// HTTP API. The agent loop (agentctl agent) serves the ten tools a task
// needs; the MCP server serves the same ten plus the ones a harness uses
// to manage its workspace (fork, restore, the exec journal), so a model
// meets the same tools wherever it runs.
//
// exec answers within a bounded wait: a command still running then is
// answered with its output so far, its exec id and a byte offset, and
// exec_wait goes on from that offset. So no call outlives a harness's
// timeout, and a model never loses a command it started.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"computerd/client"
	"computerd/wire"
)

// MaxResult is the most text one tool result hands a model; longer output
// keeps its head and tail around a marker, since a model's context is small
// and the end of a command's output is where the error usually is.
const MaxResult = 32 << 10

// Tool is one tool a model can call.
type Tool struct {
	Name        string
	Description string
	Schema      json.RawMessage // a JSON Schema object for the arguments
	// Mutates says the tool changes the workspace (a retry must not apply
	// it twice: see Call.Key).
	Mutates bool
	// Keyed says Call.Key makes the call idempotent (exec, write, edit).
	Keyed bool
	run   func(ctx context.Context, s *Set, c Call) (Result, error)
}

// Call is one call of a tool.
type Call struct {
	Args json.RawMessage
	// Key makes the call idempotent: exec passes it as the exec's
	// idempotency key, so a retried call with the same key runs nothing
	// again and answers the recorded result (or attaches to the command
	// still running).
	Key string
	// Output, if set, receives exec output as it is produced.
	Output func(stream string, data []byte)
}

// Result is what a tool call answers the model, and what the journal keeps.
type Result struct {
	Text    string `json:"text"`
	IsError bool   `json:"is_error,omitempty"`
	Code    string `json:"code,omitempty"` // the error's kind: a wire code, or "exit" for a command that failed
	// For exec: the journal id and exit code; for any call that committed:
	// the revision.
	ExecID   string `json:"exec_id,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Rev      int64  `json:"rev,omitempty"`
	// For exec and exec_wait: Running says the command still runs (the
	// wait ended first); Offset is the bytes of its output up to the end
	// of what the text shows, where exec_wait goes on from.
	Running bool  `json:"running,omitempty"`
	Offset  int64 `json:"offset,omitempty"`
}

// Set is the tool set bound to one workspace through one client.
type Set struct {
	Client    *client.Client
	Workspace string
	// MCP makes the set the MCP server's: the agent's ten tools and
	// those of MCP(). Without it the set is exactly the agent's ten.
	MCP bool
	// ExecWait is how long exec and exec_wait wait for a command to end
	// when the call says not (0: DefaultExecWait). A command still
	// running then is answered as such, with its output so far.
	ExecWait time.Duration
}

// Tools lists the set's tools, in a fixed order: the agent's ten, or
// with MCP, the list MCP returns; their descriptions give the set's
// ExecWait.
func (s *Set) Tools() []Tool {
	list := all
	if s.MCP {
		list = append(append([]Tool(nil), all...), extra...)
	}
	return withWait(list, s.execWait())
}

// MCP lists the tools the MCP server serves: the agent's ten, then
// fork, restore and the exec journal (execs, exec_show), their
// descriptions giving DefaultExecWait.
func MCP() []Tool { return (&Set{MCP: true}).Tools() }

func (s *Set) execWait() time.Duration {
	if s.ExecWait > 0 {
		return s.ExecWait
	}
	return DefaultExecWait
}

// waitMark stands for the set's ExecWait in tool descriptions and schemas.
const waitMark = "{wait}"

// withWait is list with waitMark replaced by d, in seconds.
func withWait(list []Tool, d time.Duration) []Tool {
	secs := strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	out := make([]Tool, len(list))
	for i, t := range list {
		t.Description = strings.ReplaceAll(t.Description, waitMark, secs)
		t.Schema = json.RawMessage(strings.ReplaceAll(string(t.Schema), waitMark, secs))
		out[i] = t
	}
	return out
}

// Lookup finds one of the agent's tools by name.
func Lookup(name string) (Tool, bool) { return lookup((&Set{}).Tools(), name) }

func lookup(list []Tool, name string) (Tool, bool) {
	for _, t := range list {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Call runs tool name. Every failure, bad arguments included, comes back
// as a Result with IsError and a code, for the model to read and act on;
// only the context's end is an error of Call's own.
func (s *Set) Call(ctx context.Context, name string, c Call) (Result, error) {
	list := s.Tools()
	t, ok := lookup(list, name)
	if !ok {
		return errResult(wire.CodeNotFound, fmt.Sprintf("no tool %q; the tools are %s", name, strings.Join(names(list), ", "))), nil
	}
	res, err := t.run(ctx, s, c)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return errorResult(err), nil
	}
	res.Text = Clip(res.Text, MaxResult)
	return res, nil
}

func names(list []Tool) []string {
	out := make([]string, len(list))
	for i, t := range list {
		out[i] = t.Name
	}
	return out
}

// argsError is a tool's complaint about its arguments.
type argsError struct{ msg string }

func (e *argsError) Error() string { return e.msg }

// decode parses a call's arguments into v, refusing unknown fields so a
// model's typo is reported rather than ignored.
func decode(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &argsError{"bad arguments: " + err.Error()}
	}
	return nil
}

// errResult is a failed call's result; its text leads with the code, for
// the model reads only the text.
func errResult(code, msg string) Result {
	return Result{Text: fmt.Sprintf("error (%s): %s", code, msg), IsError: true, Code: code}
}

// errorResult turns an error into a tool result carrying its wire code.
func errorResult(err error) Result {
	var ae *argsError
	if errors.As(err, &ae) {
		return errResult(wire.CodeInvalid, ae.msg)
	}
	var we *wire.Error
	if errors.As(err, &we) {
		code := we.Code
		if code == "" {
			code = wire.CodeInternal
		}
		msg := we.Message
		if len(we.Paths) > 0 {
			msg += " (paths: " + strings.Join(we.Paths, ", ") + ")"
		}
		return errResult(code, msg)
	}
	// A failure the client found before sending (a path that escapes the
	// workspace) carries a core sentinel; anything else never reached
	// the server.
	if k := wire.KindOf(err); k.Code != wire.CodeInternal {
		return errResult(k.Code, err.Error())
	}
	return errResult(wire.CodeUnavailable, err.Error())
}

// Clip bounds text to about max bytes, keeping its head and tail whole
// UTF-8 sequences.
func Clip(text string, max int) string {
	if len(text) <= max {
		return text
	}
	end, start := max/4, len(text)-(max-max/4)
	for end > 0 && !utf8.RuneStart(text[end]) {
		end--
	}
	for start < len(text) && !utf8.RuneStart(text[start]) {
		start++
	}
	return fmt.Sprintf("%s\n[... %d bytes cut ...]\n%s", text[:end], start-end, text[start:])
}

// Clipper is Clip for text that streams in: written any number of bytes,
// String answers what Clip of all of them would, while it holds no more
// than about twice max of them.
type Clipper struct {
	Max   int
	head  []byte // the first Max/4+1 bytes
	tail  []byte // bytes after head; only the last Max-Max/4 are needed
	total int
}

// Write keeps p's bytes that a clip may need; it never fails.
func (c *Clipper) Write(p []byte) (int, error) {
	n := len(p)
	c.total += n
	if k := min(len(p), c.Max/4+1-len(c.head)); k > 0 {
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	if keep := c.Max - c.Max/4; len(c.tail) > 2*keep+(64<<10) {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-keep:]...)
	}
	return n, nil
}

// Len is the number of bytes written.
func (c *Clipper) Len() int { return c.total }

// String is Clip of everything written.
func (c *Clipper) String() string {
	if c.total <= c.Max {
		return string(c.head) + string(c.tail)
	}
	end := c.Max / 4
	for end > 0 && !utf8.RuneStart(c.head[end]) {
		end--
	}
	t := c.tail[len(c.tail)-(c.Max-c.Max/4):]
	start := 0
	for start < len(t) && !utf8.RuneStart(t[start]) {
		start++
	}
	return fmt.Sprintf("%s\n[... %d bytes cut ...]\n%s", c.head[:end], c.total-end-(len(t)-start), t[start:])
}
