package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"computerd/computerd/api"
	"computerd/wire"
)

// putStream writes the bytes of body to ws's path p, streamed, as alice.
func (e *env) putStream(ws, p string, body io.Reader) {
	e.t.Helper()
	req, err := http.NewRequest("PUT", e.d.URL()+"/v1/workspaces/"+ws+"/files/"+p, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("put %s: %d %s", p, resp.StatusCode, b)
	}
}

// wantError checks an answer is an error of status and code.
func wantError(t *testing.T, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	var we wire.Error
	if err := json.Unmarshal(body, &we); err != nil {
		t.Fatalf("status %d, body %q: %v", status, body, err)
	}
	if status != wantStatus || we.Code != wantCode {
		t.Fatalf("got %d %s (%s), want %d %s", status, we.Code, we.Message, wantStatus, wantCode)
	}
}

// An edit whose result would be over the edit limit is refused before it
// is built, and changes nothing: a short old string replaced everywhere by
// a long new one once asked for 64 GiB and took the daemon down.
func TestBoundEdit(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	e.putStream("w", "big", bytes.NewReader(bytes.Repeat([]byte("a"), 1<<20)))
	before := e.head("w")
	edit := func(old, new string) (int, []byte) {
		b, _ := json.Marshal(wire.Edit{Path: "big", Old: old, New: new, All: true})
		return e.mustHTTP("POST", "/v1/workspaces/w/edit", nil, string(b))
	}
	status, body := edit("a", strings.Repeat("b", 64<<10)) // 1 Mi * 64 KiB = 64 GiB
	wantError(t, status, body, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
	status, body = edit("a", strings.Repeat("b", 65)) // 65 MiB, just over
	wantError(t, status, body, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
	if after := e.head("w"); after != before {
		t.Fatalf("refused edits moved the head from %d to %d", before, after)
	}
	if got := e.tree("w")["big"]; got != strings.Repeat("a", 1<<20) {
		t.Fatalf("big changed: %d bytes", len(got))
	}
	// The daemon still answers, and an edit of the same shape within the
	// limit (exactly 64 MiB) goes through.
	status, body = edit("a", strings.Repeat("b", 64))
	if status != http.StatusOK {
		t.Fatalf("edit to 64 MiB: %d %s", status, body)
	}
	if after := e.head("w"); after != before+1 {
		t.Fatalf("head %d after the edit, want %d", after, before+1)
	}
}

// The edit limit is the server's MaxEditSize, for the result as for the file.
func TestBoundEditLimit(t *testing.T) {
	e := start(t, api.Limits{MaxEditSize: 1 << 10})
	e.ok("ws", "create", "w")
	e.write("w", "f", strings.Repeat("a", 100))
	b, _ := json.Marshal(wire.Edit{Path: "f", Old: "a", New: strings.Repeat("b", 11), All: true}) // 1100 bytes
	status, body := e.mustHTTP("POST", "/v1/workspaces/w/edit", nil, string(b))
	wantError(t, status, body, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
	b, _ = json.Marshal(wire.Edit{Path: "f", Old: "a", New: strings.Repeat("b", 10), All: true}) // 1000 bytes
	if status, body := e.mustHTTP("POST", "/v1/workspaces/w/edit", nil, string(b)); status != http.StatusOK {
		t.Fatalf("edit to 1000 bytes: %d %s", status, body)
	}
	if got := e.tree("w")["f"]; got != strings.Repeat("b", 1000) {
		t.Fatalf("f: %d bytes, want 1000 b", len(got))
	}
}
