package wire_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"computerd/wire"
)

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, file, want, wantErr string
	}{
		{name: "one line", file: file("ok", "cdt_abc\n"), want: "cdt_abc"},
		{name: "spaces around", file: file("spaced", "  cdt_abc \r\n\n"), want: "cdt_abc"},
		{name: "empty", file: file("empty", "\n"), wantErr: "want one token on one line"},
		{name: "two lines", file: file("two", "cdt_a\ncdt_b\n"), wantErr: "want one token on one line"},
		{name: "too long", file: file("long", strings.Repeat("x", 5000)), wantErr: "want one token on one line"},
		{name: "missing", file: filepath.Join(dir, "nope"), wantErr: "token file: open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(wire.TokenEnv, "cdt_from_env")
			got, err := wire.ReadToken(tc.file)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadToken: %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ReadToken: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Setenv(wire.TokenEnv, " cdt_from_env\n")
	if got, err := wire.ReadToken(""); err != nil || got != "cdt_from_env" {
		t.Fatalf("ReadToken without a file: %q, %v; want the environment's", got, err)
	}
}

func TestNewTransport(t *testing.T) {
	if tr, err := wire.NewTransport(""); err != nil || tr.TLSClientConfig != nil && tr.TLSClientConfig.RootCAs != nil {
		t.Fatalf("without a CA file: %v, want the system's roots", err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	if _, err := wire.NewTransport(notPEM); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("a CA file without certificates: %v", err)
	}
	if _, err := wire.NewTransport("/nonexistent/ca.pem"); err == nil {
		t.Fatal("a missing CA file was taken")
	}
}
