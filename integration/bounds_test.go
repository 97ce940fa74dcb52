package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"computerd/computerd/api"
	"computerd/internal/testheap"
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

// A glob of many "**" against a deep tree answers at once (8 of them
// against 41 levels took 32 s and ignored the caller going away).
func TestBoundGlob(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	deep := strings.Repeat("a/", 40) + "y"
	e.write("w", deep, "x\n")
	for _, tc := range []struct {
		name, glob, want string
	}{
		{"no match", strings.Repeat("**/", 8) + "x", "[]"},
		{"match", strings.Repeat("**/a/", 8) + "**/y", `["` + deep + `"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			status, body := e.mustHTTP("GET", "/v1/workspaces/w/find?name="+tc.glob+"&type=f", nil, "")
			took := time.Since(start)
			if status != http.StatusOK || strings.Join(strings.Fields(string(body)), "") != tc.want {
				t.Fatalf("find %s: %d %s, want %s", tc.glob, status, body, tc.want)
			}
			if took > time.Second {
				t.Fatalf("find %s took %v, want under 1 s", tc.glob, took)
			}
		})
	}
}

// lines reads n lines of size bytes of x, then "needle".
type lines struct {
	n, size, i, off int
}

func (l *lines) Read(p []byte) (int, error) {
	w := 0
	for w < len(p) {
		switch {
		case l.i < l.n && l.off < l.size:
			k := copy(p[w:], bytes.Repeat([]byte("x"), min(len(p)-w, l.size-l.off)))
			w, l.off = w+k, l.off+k
		case l.i < l.n:
			p[w] = '\n'
			w, l.i, l.off = w+1, l.i+1, 0
		case l.i == l.n:
			k := copy(p[w:], "needle\n"[l.off:])
			w, l.off = w+k, l.off+k
			if l.off == len("needle\n") {
				l.i++
			}
		default:
			return w, io.EOF
		}
	}
	return w, nil
}

// Grep's context costs memory bounded per request, not by the lines'
// lengths: 50 lines of context over 3 MiB lines held 150 MiB.
func TestBoundGrepContext(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	const n, size = 50, 3 << 20
	e.putStream("w", "long", &lines{n: n, size: size})

	var status int
	var body []byte
	growth := testheap.Growth(func() {
		status, body = e.mustHTTP("GET", fmt.Sprintf("/v1/workspaces/w/grep?pattern=needle&context=%d", n), nil, "")
	})
	if status != http.StatusOK {
		t.Fatalf("grep: %d %s", status, body)
	}
	t.Logf("heap growth during grep: %.1f MiB (%d bytes answered)", float64(growth)/(1<<20), len(body))
	if growth > 64<<20 {
		t.Fatalf("heap grew by %.1f MiB during grep, want under 64 MiB", float64(growth)/(1<<20))
	}
	var got []wire.Match
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var m wire.Match
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != n+1 {
		t.Fatalf("%d lines answered, want %d", len(got), n+1)
	}
	for _, m := range got[:n] {
		if !m.Context || len(m.Text) > 4<<10+64 || !strings.HasSuffix(m.Text, fmt.Sprintf(" [... %d more bytes]", size-4<<10)) {
			t.Fatalf("context line %d: %d bytes ending %q, want it cut at 4 KiB with a marker", m.Line, len(m.Text), m.Text[max(0, len(m.Text)-40):])
		}
	}
	if last := got[n]; last.Context || last.Line != n+1 || last.Text != "needle" {
		t.Fatalf("the match: %+v", last)
	}
	// The daemon still answers.
	if got := e.ok("grep", "w", "needle"); got != "long:needle\n" {
		t.Fatalf("grep after: %q", got)
	}
}

// Grep's context lines, kept in a ring, come out as grep -C gives them:
// each match with the lines around it, a break between groups apart.
func TestGrepContextGroups(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	const total = 300
	match := map[int]bool{5: true, 6: true, 15: true, 29: true, 100: true, 180: true, 300: true}
	var b strings.Builder
	for n := 1; n <= total; n++ {
		if match[n] {
			fmt.Fprintf(&b, "hit %d\n", n)
		} else {
			fmt.Fprintf(&b, "line %d\n", n)
		}
	}
	e.write("w", "f", b.String())
	for _, c := range []int{0, 1, 2, 70, 1000} {
		t.Run(fmt.Sprint("context=", c), func(t *testing.T) {
			// The model: every line within c of a match, a break before a
			// line that does not follow the last one written (with context only).
			var want []string
			last := 0
			for n := 1; n <= total; n++ {
				near := false
				for m := range match {
					near = near || (n >= m-c && n <= m+c)
				}
				if !near {
					continue
				}
				if c > 0 && last > 0 && n > last+1 {
					want = append(want, "--")
				}
				want = append(want, fmt.Sprintf("%d %v", n, !match[n]))
				last = n
			}
			status, body := e.mustHTTP("GET", fmt.Sprintf("/v1/workspaces/w/grep?pattern=hit&context=%d", c), nil, "")
			if status != http.StatusOK {
				t.Fatalf("grep: %d %s", status, body)
			}
			var got []string
			sc := bufio.NewScanner(bytes.NewReader(body))
			for sc.Scan() {
				var m wire.Match
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Fatal(err)
				}
				if m.Break {
					got = append(got, "--")
					continue
				}
				if wantText := fmt.Sprintf("line %d", m.Line); m.Context && m.Text != wantText {
					t.Fatalf("context line %d: %q, want %q", m.Line, m.Text, wantText)
				}
				got = append(got, fmt.Sprintf("%d %v", m.Line, m.Context))
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("got  %v\nwant %v", got, want)
			}
		})
	}
}
