package command_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"computerd/computerd/command"
	"computerd/internal/version"
)

// run runs the computerd command line in-process and returns its stdout
// and its error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := command.Run(context.Background(), append([]string{"computerd"}, args...), &out, &bytes.Buffer{})
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "--version")
	if want := "computerd version " + version.String() + "\n"; err != nil || out != want {
		t.Fatalf("--version: %q %v, want %q", out, err, want)
	}
}

// Token and tenant commands refuse a data directory that holds no store,
// naming the directory and --data, and make none there; token create
// --init makes one, after which the others work.
func TestTokenNeedsStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, args := range [][]string{
		{"token", "create", "--data", dir, "alice"},
		{"token", "ls", "--data", dir},
		{"token", "revoke", "--data", dir, "0123456789abcdef"},
		{"tenant", "ls", "--data", dir},
		{"tenant", "set", "--data", dir, "--quota-bytes", "1G", "alice"},
	} {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "no computerd store in "+dir) || !strings.Contains(err.Error(), "pass --data DIR") {
			t.Errorf("%v: %v, want it refused naming %s and --data", args, err, dir)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%v made %s: %v", args, dir, err)
		}
	}
	if _, err := run(t, "token", "create", "--data", dir, "alice"); err == nil || !strings.Contains(err.Error(), "--init") {
		t.Errorf("token create: %v, want it to offer --init", err)
	}
	tok, err := run(t, "token", "create", "--init", "--data", dir, "alice")
	if err != nil || !strings.HasPrefix(tok, "cdt_") {
		t.Fatalf("token create --init: %q %v", tok, err)
	}
	if out, err := run(t, "token", "ls", "--data", dir); err != nil || !strings.Contains(out, "alice") {
		t.Fatalf("token ls after --init: %q %v", out, err)
	}
}

// Every command's help ends with an example, and no flag repeats its
// default or shows a zero one.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"serve", "--help"}, {"token", "--help"}, {"token", "create", "--help"}, {"token", "ls", "--help"},
		{"token", "revoke", "--help"}, {"tenant", "--help"}, {"tenant", "ls", "--help"}, {"tenant", "set", "--help"},
		{"store", "--help"}, {"store", "import", "--help"}, {"store", "ls", "--help"}, {"store", "log", "--help"},
		{"store", "diff", "--help"}, {"store", "cat", "--help"}, {"store", "fsck", "--help"}, {"store", "gc", "--help"},
	} {
		out, err := run(t, args...)
		if err != nil || !strings.Contains(out, "EXAMPLE") {
			t.Errorf("computerd %s: %v, no example:\n%s", strings.Join(args, " "), err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "default") > 1 || strings.Contains(line, "(default: 0)") || strings.Contains(line, "(default: false)") {
				t.Errorf("computerd %s: %q", strings.Join(args, " "), line)
			}
		}
	}
}

// A flag a command does not take is one line naming the whole command,
// not "Incorrect Usage" and the whole help.
func TestUsageError(t *testing.T) {
	out, err := run(t, "token", "create", "--nope", "alice")
	if err == nil || err.Error() != "flag provided but not defined: -nope (see computerd token create --help)" || strings.Contains(out, "USAGE") {
		t.Fatalf("token create --nope: %v\n%s", err, out)
	}
}

// Every size flag takes the one size syntax (4G, 512M, or bytes) and
// refuses what is not a size, naming the flag.
func TestServeSizes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	serve := func(flags ...string) error {
		_, err := run(t, append([]string{"serve", "--data", dir, "--listen", "127.0.0.1:0", "--metrics-listen", ""}, flags...)...)
		return err
	}
	for _, name := range []string{"max-body", "max-upload", "http-body-min-rate", "exec-max-memory", "exec-max-output", "exec-max-write", "quota-bytes"} {
		if err := serve("--"+name, "lots"); err == nil || !strings.Contains(err.Error(), "--"+name) || !strings.Contains(err.Error(), `size "lots"`) {
			t.Errorf("--%s lots: %v", name, err)
		}
		// Accepted: the serve fails on the next flag.
		for _, v := range []string{"4G", "512M", "1048576"} {
			if err := serve("--"+name, v, "--gc-interval", "-1s"); err == nil || !strings.Contains(err.Error(), "--gc-interval") {
				t.Errorf("--%s %s: %v, want it taken", name, v, err)
			}
		}
	}
	out, _ := run(t, "serve", "--help")
	for _, want := range []string{`--exec-max-memory value`, `(default: "4G")`, `--max-upload value`, `(default: "8G")`} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}
