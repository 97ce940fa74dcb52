package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"computerd/client"
	"computerd/tools"
	"computerd/wire"
)

// offline is a tool set whose server refuses every connection: a call that
// gets past its arguments fails as unavailable, never as invalid.
func offline() *tools.Set {
	return &tools.Set{Client: client.New("http://127.0.0.1:1", "cdt_none"), Workspace: "w"}
}

// jsonTypes are the type names JSON Schema knows.
var jsonTypes = []string{"string", "integer", "number", "boolean", "object", "array", "null"}

// Every tool's schema is a JSON Schema object: typed properties, the
// required ones among them, nothing else allowed; and its names and
// descriptions are there for a model to read.
func TestSchemas(t *testing.T) {
	set := offline()
	if len(set.Tools()) == 0 {
		t.Fatal("no tools")
	}
	seen := map[string]bool{}
	for _, tool := range set.Tools() {
		t.Run(tool.Name, func(t *testing.T) {
			if tool.Name == "" || seen[tool.Name] {
				t.Fatalf("name %q empty or repeated", tool.Name)
			}
			seen[tool.Name] = true
			if strings.TrimSpace(tool.Description) == "" {
				t.Error("no description")
			}
			if got, ok := tools.Lookup(tool.Name); !ok || got.Name != tool.Name {
				t.Errorf("Lookup(%q) = %q, %v", tool.Name, got.Name, ok)
			}
			var s struct {
				Type                 string                    `json:"type"`
				Properties           map[string]map[string]any `json:"properties"`
				Required             []string                  `json:"required"`
				AdditionalProperties *bool                     `json:"additionalProperties"`
			}
			dec := json.NewDecoder(strings.NewReader(string(tool.Schema)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&s); err != nil {
				t.Fatalf("schema %s: %v", tool.Schema, err)
			}
			if s.Type != "object" {
				t.Errorf("type %q, want object", s.Type)
			}
			if s.Properties == nil {
				t.Errorf("no properties object in %s", tool.Schema)
			}
			if s.AdditionalProperties == nil || *s.AdditionalProperties {
				t.Errorf("additionalProperties %v, want false (the handler refuses unknown fields)", s.AdditionalProperties)
			}
			for _, r := range s.Required {
				if _, ok := s.Properties[r]; !ok {
					t.Errorf("required %q is not a property", r)
				}
			}
			if len(slices.Compact(slices.Sorted(slices.Values(s.Required)))) != len(s.Required) {
				t.Errorf("required repeats a name: %v", s.Required)
			}
			for name, p := range s.Properties {
				typ, _ := p["type"].(string)
				if !slices.Contains(jsonTypes, typ) {
					t.Errorf("property %s: type %v", name, p["type"])
				}
				if enum, ok := p["enum"]; ok {
					if vals, ok := enum.([]any); !ok || len(vals) == 0 {
						t.Errorf("property %s: enum %v is not a non-empty array", name, enum)
					}
				}
				for _, k := range []string{"minimum", "maximum"} {
					if v, ok := p[k]; ok {
						if _, num := v.(float64); !num || (typ != "integer" && typ != "number") {
							t.Errorf("property %s: %s %v on type %s", name, k, v, typ)
						}
					}
				}
			}
		})
	}
}

// What a schema names, the handler takes: a call with every property set
// gets past its arguments (and fails only on the unreachable server), and
// a name the schema lacks is refused as invalid.
func TestSchemaMatchesHandler(t *testing.T) {
	set := offline()
	ctx := context.Background()
	for _, tool := range set.Tools() {
		t.Run(tool.Name, func(t *testing.T) {
			var s struct {
				Properties map[string]map[string]any `json:"properties"`
			}
			if err := json.Unmarshal(tool.Schema, &s); err != nil {
				t.Fatal(err)
			}
			args := map[string]any{}
			for name, p := range s.Properties {
				switch p["type"] {
				case "string":
					args[name] = "x"
					if enum, ok := p["enum"].([]any); ok {
						args[name] = enum[0]
					}
				case "integer", "number":
					args[name] = 1
				case "boolean":
					args[name] = true
				}
			}
			full, _ := json.Marshal(args)
			res, err := set.Call(ctx, tool.Name, tools.Call{Args: full})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := res.Code, wire.CodeUnavailable; got != want {
				t.Errorf("args %s: code %q (%s), want %q", full, got, res.Text, want)
			}
			args["no_such_arg"] = 1
			extra, _ := json.Marshal(args)
			res, err = set.Call(ctx, tool.Name, tools.Call{Args: extra})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := res.Code, wire.CodeInvalid; !res.IsError || got != want || !strings.Contains(res.Text, "no_such_arg") {
				t.Errorf("args %s: %+v, want an invalid error naming no_such_arg", extra, res)
			}
		})
	}
}

// Call never fails for a tool's own errors: each comes back as a result
// with IsError and its code.
func TestCallErrors(t *testing.T) {
	set := offline()
	for _, tc := range []struct {
		name, tool, args string
		code, text       string
	}{
		{"unknown tool", "rm_rf", `{}`, wire.CodeNotFound, "read"},
		{"not JSON", "read", `{"path":`, wire.CodeInvalid, "bad arguments"},
		{"not an object", "write", `["a"]`, wire.CodeInvalid, "bad arguments"},
		{"wrong type", "read", `{"path": "f", "offset": "one"}`, wire.CodeInvalid, "bad arguments"},
		{"unknown field", "ls", `{"dir": "d"}`, wire.CodeInvalid, "dir"},
		{"empty command", "exec", `{"command": "  "}`, wire.CodeInvalid, "empty command"},
		{"no command", "exec", ``, wire.CodeInvalid, "empty command"},
		{"path escapes", "read", `{"path": "../etc/passwd"}`, wire.CodeInvalidPath, "invalid path"},
		{"server down", "ls", ``, wire.CodeUnavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := set.Call(context.Background(), tc.tool, tools.Call{Args: json.RawMessage(tc.args)})
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if !res.IsError {
				t.Errorf("IsError false: %+v", res)
			}
			if got, want := res.Code, tc.code; got != want {
				t.Errorf("code %q, want %q (%s)", got, want, res.Text)
			}
			if !strings.Contains(res.Text, tc.text) {
				t.Errorf("text %q, want it to contain %q", res.Text, tc.text)
			}
		})
	}
}

// Only a context's end is an error of Call's own.
func TestCallCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := offline().Call(ctx, "ls", tools.Call{}); err != context.Canceled {
		t.Fatalf("Call with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("0123456789", 1000) // 10000 bytes
	runes := strings.Repeat("é€😀", 500)        // 2, 3 and 4 bytes
	for _, tc := range []struct {
		name string
		text string
		max  int
	}{
		{"short", "hello", 100},
		{"exactly max", long[:100], 100},
		{"ascii", long, 1000},
		{"multibyte", runes, 1001},
		{"multibyte odd", runes, 999},
		{"tiny max", long, 3},
		{"zero max", long, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tools.Clip(tc.text, tc.max)
			if len(tc.text) <= tc.max {
				if got != tc.text {
					t.Fatalf("Clip of %d bytes to %d: %q, want it unchanged", len(tc.text), tc.max, got)
				}
				return
			}
			head, rest, ok := strings.Cut(got, "\n[... ")
			if !ok {
				t.Fatalf("no cut marker in %q", got)
			}
			_, tail, ok := strings.Cut(rest, " bytes cut ...]\n")
			if !ok {
				t.Fatalf("no cut marker end in %q", rest)
			}
			if !strings.HasPrefix(tc.text, head) || !strings.HasSuffix(tc.text, tail) {
				t.Errorf("head %q or tail %q is not the text's", head, tail)
			}
			if !utf8.ValidString(head) || !utf8.ValidString(tail) {
				t.Errorf("cut inside a UTF-8 sequence: head %q tail %q", head, tail)
			}
			if len(head)+len(tail) > tc.max {
				t.Errorf("kept %d bytes, over max %d", len(head)+len(tail), tc.max)
			}
			if len(head)+len(tail) < tc.max-6 {
				t.Errorf("kept %d bytes of max %d: more cut than the rune boundaries need", len(head)+len(tail), tc.max)
			}
			if tc.max >= 100 && (len(tail) < len(head) || len(head) == 0) {
				t.Errorf("head %d bytes, tail %d: want both, the tail longer", len(head), len(tail))
			}
			var cut int
			if _, err := fmt.Sscan(rest, &cut); err != nil || cut != len(tc.text)-len(head)-len(tail) {
				t.Errorf("marker says %d bytes cut (%v), %d were", cut, err, len(tc.text)-len(head)-len(tail))
			}
		})
	}
}

// A Clipper fed in pieces of any size answers what Clip of the whole does.
func TestClipper(t *testing.T) {
	long := strings.Repeat("0123456789", 1000)
	runes := strings.Repeat("é€😀", 500)
	for _, tc := range []struct {
		name  string
		text  string
		max   int
		piece int
	}{
		{"short", "hello", 100, 1},
		{"exactly max", long[:100], 100, 7},
		{"one over max", long[:101], 100, 7},
		{"ascii in bytes", long, 1000, 1},
		{"ascii in big pieces", long, 1000, 4096},
		{"multibyte", runes, 1001, 3},
		{"multibyte odd", runes, 999, 5},
		{"tiny max", long, 3, 2},
		{"zero max", long, 0, 10},
		{"much longer than max", strings.Repeat(long, 50), 512, 999},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &tools.Clipper{Max: tc.max}
			for rest := tc.text; rest != ""; {
				k := min(tc.piece, len(rest))
				if n, err := c.Write([]byte(rest[:k])); n != k || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
				rest = rest[k:]
			}
			if got, want := c.String(), tools.Clip(tc.text, tc.max); got != want {
				t.Errorf("got\n%q\nwant\n%q", got, want)
			}
			if got, want := c.Len(), len(tc.text); got != want {
				t.Errorf("Len %d, want %d", got, want)
			}
		})
	}
}
