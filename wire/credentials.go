package wire

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// TokenEnv is the environment variable a client's bearer token is read
// from when no token file is named (agentctl's, and an executor's token
// of its home).
const TokenEnv = "COMPUTER_TOKEN"

// ErrTokenOnCommandLine refuses a token given as a command-line value:
// every user of the host can read a process's arguments in
// /proc/PID/cmdline, while a file or the environment stays the owner's.
var ErrTokenOnCommandLine = errors.New("--token is not taken: a token on the command line is visible to every user of the host (/proc/PID/cmdline); put it in a file named by --token-file, or in " + TokenEnv)

// maxTokenFile bounds what is read of a token file: a token is 52 bytes.
const maxTokenFile = 4 << 10

// ReadToken returns the bearer token in file (one line; surrounding
// space and the newline are dropped) or, when file is "", the value of
// COMPUTER_TOKEN ("" when unset: calls then go without a token).
func ReadToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv(TokenEnv)), nil
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", file, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || len(b) > maxTokenFile || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s: want one token on one line", file)
	}
	return tok, nil
}

// NewTransport returns an HTTP transport (http.DefaultTransport's
// settings) that trusts exactly the certificate authorities in the PEM
// file caFile, or the system's roots when caFile is "".
func NewTransport(caFile string) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile == "" {
		return tr, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", caFile)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return tr, nil
}
