package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	daemoncmd "computerd/computerd/command"
)

// TestServeRefusesBadFlags: computerd serve refuses bad sandbox, exec,
// credential and TLS flags with a clear message, before it touches its
// data directory.
func TestServeRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--sandbox-warm", "-1"}, "--sandbox-warm -1: want 0 to 64"},
		{[]string{"--sandbox-warm", "65"}, "--sandbox-warm 65: want 0 to 64"},
		{[]string{"--sandbox-id-base", "0"}, "--sandbox-id-base 0: want 1 to 4294901759"},
		{[]string{"--sandbox-id-base", "4294967295"}, "--sandbox-id-base 4294967295: want 1 to 4294901759"},
		{[]string{"--sandbox-helper", "/nonexistent/computerd-sandbox"}, "--sandbox-helper /nonexistent/computerd-sandbox"},
		{[]string{"--retention", "last=0"}, "--retention: retention \"last=0\""},
		{[]string{"--retention", "forever"}, "want \"all\" or rules for=AGE,last=N"},
		{[]string{"--gc-interval", "-1s"}, "--gc-interval -1s"},
		{[]string{"--exec-max-total", "0"}, "--exec-max-total: want more than 0"},
		{[]string{"--exec-max-cpus", "-1"}, "--exec-max-cpus: want more than 0"},
		{[]string{"--exec-max-timeout", "0s"}, "--exec-max-timeout: want more than 0"},
		{[]string{"--home", "http://127.0.0.1:1", "--token", "cdt_on_the_command_line"}, "--token is not taken"},
		{[]string{"--home", "http://127.0.0.1:1", "--token-file", "/nonexistent/token"}, "token file: open /nonexistent/token"},
		{[]string{"--tls-cert", "/nonexistent/cert.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"}, "TLS certificate: open /nonexistent/cert.pem"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		args := append([]string{"computerd", "serve", "--data", dir, "--listen", "127.0.0.1:0", "--metrics-listen", ""}, tc.flags...)
		var stderr bytes.Buffer
		err := daemoncmd.Run(context.Background(), args, &bytes.Buffer{}, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %v: %v, want an error with %q", tc.flags, err, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("serve %v made its data directory: %v", tc.flags, err)
		}
	}
}
