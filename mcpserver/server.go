// Package mcpserver serves a workspace's tools (package tools) over the
// Model Context Protocol, so any coding harness can work in a durable
// workspace. It builds the SDK's server over one API client: agentctl
// serves it over stdio (`agentctl mcp WS`), computerd over streamable HTTP
// at /v1/mcp, each call going through the HTTP API, so auth, tenancy and
// error codes are the API's.
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"computerd/client"
	"computerd/tools"
	"computerd/wire"
)

// Name is the server's name in the MCP handshake.
const Name = "computerd"

// instructions tell a model what kind of place it works in.
const instructions = "These tools work in a durable, revisioned workspace held by computerd. " +
	"Every write, edit and exec commits one numbered revision, and every revision stays readable: " +
	"log lists them, diff compares two, restore brings back an earlier state, fork makes a copy in milliseconds. " +
	"exec runs a shell command in a fresh sandbox (no network) whose /workspace is the workspace; " +
	"a command still running after the call's wait goes on, and exec_wait waits for more of it. " +
	"Each tool takes an optional workspace argument; without it a call works in the server's workspace."

// New returns the MCP server of the tools in tools.MCP, each call made
// through c in workspace ws unless the call names its own (ws may be
// empty: every call must then name one).
func New(c *client.Client, ws string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "computerd workspace", Version: "v1"},
		&mcp.ServerOptions{Instructions: instructions})
	for _, t := range tools.MCP() {
		s.AddTool(&mcp.Tool{
			Name:        t.Name,
			Description: t.Description,
			InputSchema: inputSchema(t, ws == ""),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: !t.Mutates, DestructiveHint: new(false), OpenWorldHint: new(false)},
		}, handler(c, ws, t))
	}
	return s
}

// inputSchema is t's schema plus the arguments every MCP call may carry:
// workspace (required when the server has none) and, for a keyed tool,
// its idempotency key.
func inputSchema(t tools.Tool, needWorkspace bool) json.RawMessage {
	var s map[string]any
	if err := json.Unmarshal(t.Schema, &s); err != nil {
		panic(fmt.Sprintf("mcpserver: tool %s: bad schema: %v", t.Name, err))
	}
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		s["properties"] = props
	}
	props["workspace"] = map[string]any{"type": "string",
		"description": "the workspace to work in (default: the one the server was started for)"}
	if needWorkspace {
		req, _ := s["required"].([]any)
		s["required"] = append(req, "workspace")
	}
	if t.Keyed {
		props["key"] = map[string]any{"type": "string", "maxLength": 256,
			"description": "idempotency key: a retried call with the same key does nothing again and answers the first call's result"}
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: tool %s: %v", t.Name, err))
	}
	return b
}

// outcome is a result's structured content. Harnesses that find
// structured content hand the model only that (Codex and Claude Code do),
// so it holds everything the text says: the text itself, whole, and the
// fields a program reads without parsing it (code, exec id, exit code,
// revision, and for a command still running, the offset to go on from).
// A result with none of those fields has no structured content, and
// tools declare no output schema (a schema would oblige every result of
// the tool to carry one).
type outcome struct {
	Workspace string `json:"workspace,omitempty"`
	Text      string `json:"text"`
	Code      string `json:"code,omitempty"`
	ExecID    string `json:"exec_id,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Rev       int64  `json:"rev,omitempty"`
	Running   bool   `json:"running,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
}

// handler runs tool t. A tool's failure is a result with IsError and its
// code in the text, for the model to read; only the call's cancellation
// is an error of the protocol.
func handler(c *client.Client, defaultWS string, t tools.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, ws, key, err := split(req.Params.Arguments, t.Keyed)
		if err != nil {
			return toolError(wire.CodeInvalid, err.Error()), nil
		}
		if ws == "" {
			ws = defaultWS
		}
		if ws == "" {
			return toolError(wire.CodeInvalid, "no workspace: pass the workspace argument (this server was started without one)"), nil
		}
		call := tools.Call{Args: args, Key: key}
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			call.Output = progress(ctx, req.Session, tok)
		}
		set := &tools.Set{Client: c, Workspace: ws, MCP: true}
		res, err := set.Call(ctx, t.Name, call)
		if err != nil {
			return nil, err
		}
		out := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Text}}, IsError: res.IsError}
		if res.Code != "" || res.ExecID != "" || res.ExitCode != nil || res.Rev != 0 || res.Running {
			out.StructuredContent = outcome{Workspace: ws, Text: res.Text, Code: res.Code, ExecID: res.ExecID, ExitCode: res.ExitCode,
				Rev: res.Rev, Running: res.Running, Offset: res.Offset}
		}
		return out, nil
	}
}

// toolError is a failed call's result, its text led by the code as
// package tools writes it.
func toolError(code, msg string) *mcp.CallToolResult {
	text := fmt.Sprintf("error (%s): %s", code, msg)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true,
		StructuredContent: outcome{Text: text, Code: code}}
}

// split takes the MCP-only arguments (workspace, and key for a keyed
// tool) out of a call's arguments and returns the rest for the tool.
func split(raw json.RawMessage, keyed bool) (args json.RawMessage, ws, key string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "", "", nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", "", fmt.Errorf("bad arguments: want a JSON object: %v", err)
	}
	take := func(name string) (string, error) {
		v, ok := m[name]
		if !ok {
			return "", nil
		}
		delete(m, name)
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", fmt.Errorf("bad arguments: %s: want a string", name)
		}
		return s, nil
	}
	if ws, err = take("workspace"); err != nil {
		return nil, "", "", err
	}
	if keyed {
		if key, err = take("key"); err != nil {
			return nil, "", "", err
		}
	}
	if args, err = json.Marshal(m); err != nil {
		return nil, "", "", err
	}
	return args, ws, key, nil
}

// progress sends a command's output as progress notifications of the
// call with token tok, in order; the progress is the bytes sent so far.
// A chunk that ends inside a UTF-8 sequence keeps its tail for the next
// chunk of its stream, so every message is whole text.
func progress(ctx context.Context, ss *mcp.ServerSession, tok any) func(stream string, data []byte) {
	var sent float64
	held := map[string][]byte{}
	return func(stream string, data []byte) {
		data = append(held[stream], data...)
		cut := len(data)
		for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax; i-- {
			if utf8.RuneStart(data[i]) {
				if !utf8.FullRune(data[i:]) {
					cut = i
				}
				break
			}
		}
		held[stream] = append([]byte(nil), data[cut:]...)
		if cut == 0 {
			return
		}
		sent += float64(cut)
		// A notification that cannot be sent loses only the live view:
		// the result carries the output all the same.
		_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: string(data[:cut]),
			Progress: sent, Meta: mcp.Meta{"stream": stream}})
	}
}
