package command

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"computerd/internal/clihelp"
	"computerd/internal/version"
)

// noServer is an address where no computerd answers.
const noServer = "http://127.0.0.1:1"

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-v"} {
		out, err := runOut(t, arg)
		if want := "agentctl version " + version.String() + "\n"; err != nil || out != want {
			t.Errorf("agentctl %s: %q %v, want %q", arg, out, err, want)
		}
	}
}

// A nested command's usage line names its parent: "agentctl ws rm", not
// "agentctl rm" (the file remover).
func TestNestedUsage(t *testing.T) {
	n := 0
	clihelp.Walk(commands(), func(path string, c *cli.Command) {
		if !strings.Contains(path, " ") || c.ArgsUsage == "" || strings.HasPrefix(c.ArgsUsage, "[") {
			return // no argument it needs
		}
		n++
		_, err := runOut(t, append([]string{"--server", noServer}, strings.Fields(path)...)...)
		if want := "usage: agentctl " + path + " " + c.ArgsUsage; err == nil || err.Error() != want {
			t.Errorf("agentctl %s: %v, want %q", path, err, want)
		}
	})
	if n < 10 {
		t.Fatalf("only %d nested commands with arguments", n)
	}
}

// Every command's help ends with an example; no flag repeats its default
// or shows a zero one.
func TestHelpExamples(t *testing.T) {
	if missing := explain(commands()); len(missing) > 0 {
		t.Fatalf("commands without an example in help.go: %q", missing)
	}
	paths := [][]string{nil}
	clihelp.Walk(commands(), func(path string, _ *cli.Command) { paths = append(paths, strings.Fields(path)) })
	for _, p := range paths {
		out, err := runOut(t, append(p, "--help")...)
		if err != nil || !strings.Contains(out, "\nEXAMPLE") {
			t.Errorf("agentctl %s --help: %v, no example\n%s", strings.Join(p, " "), err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "default") > 1 || strings.Contains(line, "(default: 0)") || strings.Contains(line, "(default: false)") {
				t.Errorf("agentctl %s --help: %q", strings.Join(p, " "), line)
			}
		}
	}
}

// A flag a command does not take is one line, not the whole help.
func TestUnknownFlag(t *testing.T) {
	for _, args := range [][]string{{"--nope"}, {"ws", "rm", "--nope", "w"}, {"agent", "attach", "--nope", "r1"}} {
		out, err := runOut(t, args...)
		want := "flag provided but not defined: -nope (see agentctl"
		if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(out, "USAGE") || strings.Contains(out, "Incorrect") {
			t.Errorf("agentctl %q: %v\n%s", args, err, out)
		}
	}
}

// A server address without its scheme is refused with the URL it
// probably meant; one where nothing listens says so, and where the
// address came from.
func TestServerErrors(t *testing.T) {
	for _, tc := range []struct{ server, want string }{
		{"127.0.0.1:17777", `server "127.0.0.1:17777" (--server or COMPUTER_URL): want an http:// or https:// URL, such as http://127.0.0.1:17777`},
		{"localhost:7777", "such as http://localhost:7777"},
		{"ftp://host", "want an http:// or https:// URL"},
	} {
		if _, err := runOut(t, "--server", tc.server, "ws", "ls"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--server %s: %v, want %q", tc.server, err, tc.want)
		}
	}
	t.Setenv("COMPUTER_URL", "127.0.0.1:17777")
	if _, err := runOut(t, "ws", "ls"); err == nil || !strings.Contains(err.Error(), "such as http://127.0.0.1:17777") {
		t.Errorf("COMPUTER_URL without a scheme: %v", err)
	}
	t.Setenv("COMPUTER_URL", noServer)
	_, err := runOut(t, "ws", "ls")
	if want := "no computerd answers at " + noServer + " (connection refused): is computerd serve running at that address? (it came from COMPUTER_URL)"; err == nil || err.Error() != want {
		t.Errorf("nothing listening: %v, want %q", err, want)
	}
	_, err = runOut(t, "--server", noServer, "ws", "ls")
	if err == nil || !strings.HasSuffix(err.Error(), "(it came from --server)") {
		t.Errorf("nothing listening: %v", err)
	}
	var out bytes.Buffer
	Main(context.Background(), []string{"agentctl", "--json", "--server", noServer, "ws", "ls"}, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out})
	if !strings.Contains(out.String(), `"code":"unavailable"`) {
		t.Errorf("--json, nothing listening: %s", out.String())
	}
}

// export refuses to write its archive to a terminal, before it asks
// computerd for anything; --output writes it elsewhere.
func TestExportRefusesTerminal(t *testing.T) {
	term, _ := openPTY(t)
	var errb bytes.Buffer
	err := Run(context.Background(), []string{"agentctl", "--server", noServer, "export", "proj"}, IO{Stdin: strings.NewReader(""), Stdout: term, Stderr: &errb})
	if err == nil || !strings.Contains(err.Error(), "stdout is a terminal") || !strings.Contains(err.Error(), "agentctl export proj > archive.tar") {
		t.Fatalf("export to a terminal: %v", err)
	}
	// Not a terminal, though a character device: asked of the server.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	err = Run(context.Background(), []string{"agentctl", "--server", noServer, "export", "proj"}, IO{Stdin: strings.NewReader(""), Stdout: null, Stderr: &errb})
	if err == nil || !strings.Contains(err.Error(), "no computerd answers") {
		t.Fatalf("export to /dev/null: %v", err)
	}
}

// complete runs agentctl as the completion scripts do: the words up to
// the cursor's, then the completion flag.
func completeOut(t *testing.T, words ...string) []string {
	t.Helper()
	out, err := runOut(t, append(words, completeFlag)...)
	if err != nil {
		t.Fatalf("complete %q: %v", words, err)
	}
	return strings.Fields(out)
}

func TestCompletion(t *testing.T) {
	t.Setenv("COMPUTER_URL", noServer)
	has := func(got []string, want ...string) bool {
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		words []string
		want  []string // among the candidates
		none  bool     // no candidate at all
	}{
		{[]string{""}, []string{"ws", "read", "exec", "agent", "status", "completion"}, false},
		{[]string{"e"}, []string{"edit", "exec", "execs", "exec-log", "export"}, false},
		{[]string{"ws", ""}, []string{"create", "ls", "rm", "fork"}, false},
		{[]string{"agent", "re"}, []string{"resume"}, false},
		{[]string{"-"}, []string{"--server", "--token-file", "--json", "--version"}, false},
		{[]string{"read", "-"}, []string{"--rev", "-r", "--offset", "--limit", "--json", "--help"}, false},
		{[]string{"ws", "rm", "--"}, []string{"--yes", "--json"}, false},
		{[]string{"--server", noServer, "exec", "proj", "--t"}, []string{"--timeout"}, false},
		// Where computerd does not answer, no workspace name; after one,
		// a PATH: nothing, and the shell completes file names.
		{[]string{"read", ""}, nil, true},
		{[]string{"read", "gomod", ""}, nil, true},
		{[]string{"read", "--rev", ""}, nil, true},
		{[]string{"nosuchcommand", ""}, nil, true},
	} {
		got := completeOut(t, tc.words...)
		if tc.none && len(got) > 0 || !has(got, tc.want...) {
			t.Errorf("complete %q: %q, want %q", tc.words, got, tc.want)
		}
		for _, g := range got {
			if cur := tc.words[len(tc.words)-1]; !strings.HasPrefix(g, cur) {
				t.Errorf("complete %q: %q does not start with %q", tc.words, g, cur)
			}
		}
	}
}

// The bash script passes the words up to the cursor's, the current one
// included (empty at a new word), and takes agentctl's lines as they are.
func TestBashCompletionScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, err := runOut(t, "completion", "bash")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "completion.bash"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	// agentctl here is a stand-in that records its arguments and answers two lines.
	test := `source completion.bash
agentctl() { printf '%s\n' "$@" > args; printf 'fork\nfrom a\n'; }
COMP_WORDS=(agentctl ws f); COMP_CWORD=2; _agentctl; printf '%s\n' "${COMPREPLY[@]}" > reply
COMP_WORDS=(agentctl ws ''); COMP_CWORD=2; _agentctl; printf '%s\n' "$@" > /dev/null; cp args args-empty
`
	cmd := exec.Command(bash, "-c", test)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := read("reply"), "fork\nfrom a\n"; got != want {
		t.Errorf("COMPREPLY %q, want %q", got, want)
	}
	if got, want := read("args-empty"), "ws\n\n"+completeFlag+"\n"; got != want {
		t.Errorf("agentctl got %q, want %q", got, want)
	}
}

func TestZshCompletionScript(t *testing.T) {
	out, err := runOut(t, "completion", "zsh")
	if err != nil || !strings.Contains(out, "#compdef agentctl") || !strings.Contains(out, `"${(@)words[2,CURRENT]}" `+completeFlag) {
		t.Fatalf("completion zsh: %v\n%s", err, out)
	}
}
