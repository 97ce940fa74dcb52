package command

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// computerd serve as a user other than root fails at once, saying why
// and what --no-exec gives, instead of "permission denied" from exec
// recovery; with --no-exec it goes on (here to a bad flag after the check).
func TestServeNotRoot(t *testing.T) {
	orig := geteuid
	geteuid = func() int { return 1000 }
	t.Cleanup(func() { geteuid = orig })
	dir := t.TempDir() + "/data"
	serve := func(flags ...string) error {
		args := append([]string{"computerd", "serve", "--data", dir, "--listen", "127.0.0.1:0", "--metrics-listen", ""}, flags...)
		return Run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
	}
	err := serve()
	for _, want := range []string{"sandboxed exec needs root", "user id 1000", "run computerd serve as root", "--no-exec", "exec answers 503 unavailable"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve as uid 1000: %v, want it to say %q", err, want)
		}
	}
	if err := serve("--no-exec", "--gc-interval", "-1s"); err == nil || strings.Contains(err.Error(), "needs root") {
		t.Errorf("serve --no-exec as uid 1000: %v, want the check passed", err)
	}
}
