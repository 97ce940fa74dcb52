package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	agentcmd "computerd/agentctl/command"
	daemoncmd "computerd/computerd/command"
	"computerd/computerd/daemon"
	"computerd/fsstore"
	"computerd/internal/version"
	"computerd/wire"
)

// startCLI starts a daemon without exec, enough for the command line's
// own behaviour.
func startCLI(t *testing.T) *env {
	t.Helper()
	return startWith(t, daemon.Config{NoExec: true})
}

// Both binaries print their version in the same form; computerd answers
// it on GET /v1/version (to anyone; who the token is to its holder) and
// in computerd_build_info.
func TestVersionEverywhere(t *testing.T) {
	e := startCLI(t)
	v := version.String()
	var out bytes.Buffer
	if err := daemoncmd.Run(context.Background(), []string{"computerd", "--version"}, &out, io.Discard); err != nil || out.String() != "computerd version "+v+"\n" {
		t.Errorf("computerd --version: %q %v", out.String(), err)
	}
	if got := e.ok("--version"); got != "agentctl version "+v+"\n" {
		t.Errorf("agentctl --version: %q", got)
	}

	get := func(token string) (int, wire.VersionInfo) {
		req, _ := http.NewRequest("GET", e.d.URL()+"/v1/version", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var info wire.VersionInfo
		json.NewDecoder(resp.Body).Decode(&info)
		return resp.StatusCode, info
	}
	code, info := get("")
	if code != 200 || info.Version != v || info.Go == "" || info.API != "v1" || info.Tenant != "" || info.TokenID != "" {
		t.Errorf("GET /v1/version without a token: %d %+v", code, info)
	}
	mount := e.newToken("bob", fsstore.ScopeMount)
	code, info = get(mount)
	if code != 200 || info.Version != v || info.Tenant != "bob" || len(info.TokenID) != 16 || len(info.Scopes) != 1 || info.Scopes[0] != "mount" {
		t.Errorf("GET /v1/version with bob's token: %d %+v", code, info)
	}
	if code, _ := get("cdt_wrong"); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/version with a wrong token: %d, want 401", code)
	}
	if got := metric(t, e.d.MetricsURL(), fmt.Sprintf(`computerd_build_info{goversion=%q,revision=%q,version=%q}`, version.Go(), version.Revision(), v)); got != 1 {
		t.Errorf("computerd_build_info = %v, want 1", got)
	}
	// The call without a token was no refused call.
	if got := metric(t, e.d.MetricsURL(), "computerd_http_unauthenticated_total"); got != 1 {
		t.Errorf("computerd_http_unauthenticated_total = %v, want 1 (the wrong token only)", got)
	}
}

// agentctl status names the daemon it talks to, its version, the tenant
// and the token's scopes; with a token the daemon does not know, it
// still names the daemon and says where such a token comes from.
func TestStatus(t *testing.T) {
	e := startCLI(t)
	out := e.ok("status")
	for _, want := range []string{"server:    " + e.d.URL() + " (from --server)", "computerd: " + version.String(), "tenant:    alice",
		"scopes: none", "agentctl:  " + version.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	mount := e.newToken("alice", fsstore.ScopeMount)
	out, _, err := e.runAs(mount, nil, "status", "--json")
	var rep struct {
		Server    string           `json:"server"`
		Computerd wire.VersionInfo `json:"computerd"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Server != e.d.URL() || rep.Computerd.Tenant != "alice" ||
		strings.Join(rep.Computerd.Scopes, ",") != "mount" || rep.Computerd.Version != version.String() {
		t.Errorf("status --json with a mount token: %v %+v\n%s", err, rep, out)
	}

	other := tokenFor(t, t.TempDir(), "alice") // another data directory's
	out, _, err = e.runAs(other, nil, "status")
	if err == nil || agentcmd.ExitStatus(err) != 1 {
		t.Errorf("status with another directory's token: %v, want status 1", err)
	}
	for _, want := range []string{"computerd: " + version.String(), "invalid or revoked token", "data directory", "--data"} {
		if !strings.Contains(out, want) {
			t.Errorf("status with another directory's token lacks %q:\n%s", want, out)
		}
	}
	out, _, err = e.runAs("", nil, "status")
	if err == nil || !strings.Contains(out, "no token: set COMPUTER_TOKEN") || !strings.Contains(out, "computerd: "+version.String()) {
		t.Errorf("status without a token: %v\n%s", err, out)
	}
}

// A token made in another data directory is refused with a message that
// says where tokens come from.
func TestTokenOfAnotherDataDir(t *testing.T) {
	e := startCLI(t)
	other := tokenFor(t, t.TempDir(), "alice")
	_, _, err := e.runAs(other, nil, "ws", "ls")
	for _, want := range []string{"invalid or revoked token", "computerd token create --data DIR"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ws ls with another directory's token: %v, want %q", err, want)
		}
	}
}

// Completion asks computerd for workspace names where a command takes
// WS, and offers nothing for other arguments.
func TestCompleteWorkspaceNames(t *testing.T) {
	e := startCLI(t)
	for _, ws := range []string{"proj", "proto", "other"} {
		e.ok("ws", "create", ws)
	}
	complete := func(words ...string) string {
		out, _, err := e.run(nil, append(words, "--generate-bash-completion")...)
		if err != nil {
			t.Fatalf("complete %q: %v", words, err)
		}
		return out
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"read", "pro"}, "proj\nproto\n"},
		{[]string{"ws", "rm", ""}, "other\nproj\nproto\n"},
		{[]string{"exec", "--timeout", "5m", "o"}, "other\n"},
		{[]string{"ws", "fork", "proj", ""}, ""}, // NEW: a name of one's own
		{[]string{"read", "proj", ""}, ""},       // PATH
		{[]string{"grep", "proj", "x", ""}, ""},
		{[]string{"ws", "f"}, "fork\n"},
	} {
		if got := complete(tc.words...); got != tc.want {
			t.Errorf("complete %q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

// openPTY opens a pseudo-terminal: the end agentctl reads and the end
// that plays the user.
func openPTY(t *testing.T) (term, user *os.File) {
	t.Helper()
	user, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { user.Close() })
	if err := unix.IoctlSetPointerInt(int(user.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(user.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { term.Close() })
	return term, user
}

// ws rm asks at a terminal; without one it needs --yes.
func TestWorkspaceRemoveAsks(t *testing.T) {
	e := startCLI(t)
	e.ok("ws", "create", "w")
	e.write("w", "f", "x")
	_, _, err := e.run(nil, "ws", "rm", "w")
	if err == nil || !strings.Contains(err.Error(), "add --yes") || e.head("w") != 2 {
		t.Fatalf("ws rm without a terminal or --yes: %v (head %d)", err, e.head("w"))
	}
	rmAtTerminal := func(answer string) (string, error) {
		term, user := openPTY(t)
		if _, err := user.WriteString(answer + "\n"); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		args := []string{"agentctl", "--server", e.d.URL(), "--token-file", tokenFile(t, e.token), "ws", "rm", "w"}
		err := agentcmd.Run(context.Background(), args, agentcmd.IO{Stdin: term, Stdout: &out, Stderr: &errb})
		return errb.String(), err
	}
	prompt, err := rmAtTerminal("n")
	if err == nil || !strings.Contains(prompt, "remove workspace w and all its history (revisions 1 to 2)? [y/N]") || e.head("w") != 2 {
		t.Fatalf("ws rm answered n: %v, prompt %q, head %d", err, prompt, e.head("w"))
	}
	if _, err := rmAtTerminal("y"); err != nil || e.head("w") != 0 {
		t.Fatalf("ws rm answered y: %v, head %d", err, e.head("w"))
	}
	e.ok("ws", "create", "w2")
	if out := e.ok("ws", "rm", "--yes", "w2"); out != "removed w2\n" || e.head("w2") != 0 {
		t.Fatalf("ws rm --yes: %q", out)
	}
	e.fails("", "workspace not found", "ws", "rm", "nope")
}

// ws ls names a fork's origin as WS@REV (ws fork --rev's terms).
func TestWorkspaceListNamesForkOrigin(t *testing.T) {
	e := startCLI(t)
	e.ok("ws", "create", "proj")
	e.write("proj", "a", "1")
	e.write("proj", "a", "2")
	e.ok("ws", "fork", "proj", "try", "--rev", "2")
	if out := e.ok("ws", "ls"); !regexp.MustCompile(`(?m)^try\s+\d+\s+\S+\s+proj@2$`).MatchString(out) {
		t.Errorf("ws ls:\n%s", out)
	}
	e.ok("ws", "rm", "--yes", "proj")
	if out := e.ok("ws", "ls"); !regexp.MustCompile(`(?m)^try\s+\d+\s+\S+\s+\(removed\)@2$`).MatchString(out) {
		t.Errorf("ws ls after the origin went:\n%s", out)
	}
}

// find takes its glob as grep takes its pattern; --name still works.
func TestFindTakesPattern(t *testing.T) {
	e := startCLI(t)
	e.ok("ws", "create", "proj")
	for _, p := range []string{"main.go", "src/a.go", "src/b.txt", "doc/c.go"} {
		e.write("proj", p, "x")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"find", "proj", "*.go"}, "doc/c.go\nmain.go\nsrc/a.go\n"},
		{[]string{"find", "proj", "*.go", "src"}, "src/a.go\n"},
		{[]string{"find", "proj", "src", "--name", "*.go"}, "src/a.go\n"},
		{[]string{"find", "proj", "--type", "d"}, "doc\nsrc\n"},
	} {
		out := e.ok(tc.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		sortStrings(lines)
		if got := strings.Join(lines, "\n") + "\n"; got != tc.want {
			t.Errorf("agentctl %s: %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// The attach bar ends at 100% with what it counted equal to its total,
// though each entry of the stream has a PAX header (sub-second times).
func TestAttachProgressTotal(t *testing.T) {
	e := startCLI(t)
	e.ok("ws", "create", "proj")
	src := t.TempDir()
	total := 0
	for i := range 40 {
		data := strings.Repeat("x", 100+i*37)
		total += len(data)
		p := filepath.Join(src, fmt.Sprintf("d%d/f%d.txt", i%4, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-time.Duration(i) * time.Hour).Add(123456789 * time.Nanosecond)
		os.Chtimes(p, when, when)
	}
	_, stderr, err := e.run(nil, "attach", "--progress", "proj", src)
	if err != nil {
		t.Fatal(err)
	}
	draws := strings.Split(strings.TrimSpace(stderr), "\r")
	last := draws[len(draws)-1]
	m := regexp.MustCompile(`(\d+)%\s+(.+?) / (.+?)  `).FindStringSubmatch(last)
	if m == nil || m[1] != "100" || m[2] != m[3] || m[3] != fmt.Sprintf("%.1f KiB", float64(total)/1024) {
		t.Fatalf("last draw of the bar %q, want 100%% of %d bytes", last, total)
	}
}
