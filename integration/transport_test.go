package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	agentcmd "computerd/agentctl/command"
	"computerd/client"
	"computerd/computerd/api"
	"computerd/computerd/daemon"
	"computerd/wire"
)

// testPKI is a certificate authority made for one test and a server
// certificate it signed for 127.0.0.1, ::1 and localhost, as PEM files.
type testPKI struct {
	CA, Cert, Key string
}

// newTestPKI makes a CA and a server certificate in a temporary directory.
func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "computerd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "computerd"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	for file, block := range map[string]*pem.Block{
		p.CA: {Type: "CERTIFICATE", Bytes: caDER}, p.Cert: {Type: "CERTIFICATE", Bytes: leafDER}, p.Key: {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// clientWithCA is a client of url that trusts exactly the CA in caFile.
func clientWithCA(t *testing.T, url, token, caFile string) *client.Client {
	t.Helper()
	tr, err := wire.NewTransport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(url, token)
	cl.HTTP.Transport = tr
	return cl
}

// TestHomeAndExecutorOverTLS runs a home and an executor that both serve
// HTTPS with a certificate of a CA made here: the executor reaches its
// home over TLS trusting that CA (--home-ca), a client trusting it works
// through both, and whatever does not trust it is refused.
func TestHomeAndExecutorOverTLS(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	pki := newTestPKI(t)
	homeDir := t.TempDir()
	token := tokenFor(t, homeDir, "alice")
	tf := tokenFile(t, token)
	home := startChild(t, homeDir, "--tls-cert", pki.Cert, "--tls-key", pki.Key)
	if !strings.HasPrefix(home.url, "https://127.0.0.1:") {
		t.Fatalf("home serves at %s, want https://127.0.0.1:PORT", home.url)
	}
	ex := startChild(t, t.TempDir(), "--home", home.url, "--home-ca", pki.CA, "--token-file", tf,
		"--tls-cert", pki.Cert, "--tls-key", pki.Key)
	if !strings.HasPrefix(ex.url, "https://") {
		t.Fatalf("executor serves at %s, want https", ex.url)
	}
	hc, xc := clientWithCA(t, home.url, token, pki.CA), clientWithCA(t, ex.url, token, pki.CA)

	// Through the executor to the home, and an exec whose revision lands there.
	if _, err := xc.CreateWorkspace(ctx, "w"); err != nil {
		t.Fatalf("create through the executor over TLS: %v", err)
	}
	if _, err := hc.Write(ctx, "w", "in.txt", strings.NewReader("over tls\n"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec, err := xc.Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "cat in.txt > out.txt"}}, nil)
	if err != nil || rec.ExitCode != 0 || rec.Rev == 0 {
		t.Fatalf("exec through the executor over TLS: %+v %v", rec, err)
	}
	if got, _ := readAll(hc, "w", "out.txt"); got != "over tls\n" {
		t.Fatalf("home's out.txt after the executor's exec: %q", got)
	}

	// A client that does not trust the CA (the system's roots) is refused
	// by both, before any request is sent.
	for name, url := range map[string]string{"home": home.url, "executor": ex.url} {
		_, err := client.New(url, token).Workspaces(ctx)
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("%s with the system's roots: %v, want an unknown authority", name, err)
		}
	}
	// Plain HTTP to the TLS port gets no API answer.
	if _, err := client.New(strings.Replace(home.url, "https://", "http://", 1), token).Workspaces(ctx); err == nil {
		t.Error("plain HTTP to the home's TLS port got an answer")
	}

	// agentctl: with --ca it works, without it is refused.
	var out, errb bytes.Buffer
	args := []string{"agentctl", "--server", ex.url, "--token-file", tf, "--ca", pki.CA, "ws", "ls"}
	if err := agentcmd.Run(ctx, args, agentcmd.IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb}); err != nil || !strings.Contains(out.String(), "w") {
		t.Fatalf("agentctl --ca ws ls: %v %q %q", err, out.String(), errb.String())
	}
	args = []string{"agentctl", "--server", ex.url, "--token-file", tf, "ws", "ls"}
	if err := agentcmd.Run(ctx, args, agentcmd.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("agentctl without --ca: %v, want a certificate error", err)
	}

	// An executor that does not trust the home's CA does not start.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "COMPUTERD_TEST_RUN="+strings.Join([]string{"computerd", "serve", "--data", t.TempDir(),
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--no-exec", "--home", home.url, "--token-file", tf}, "\x1f"))
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "certificate signed by unknown authority") {
		t.Fatalf("executor without --home-ca: %v\n%s\nwant it refused for the home's certificate", err, b)
	}
}

// TestTokenStaysOffCommandLines: an executor given its home token in a
// file or in COMPUTER_TOKEN runs, and runs an exec, while no process on
// the host shows the token in its command line (/proc/PID/cmdline, which
// every user can read). Given in a file it is in no process's
// environment either; given in COMPUTER_TOKEN, in the executor's only,
// not in its sandbox helper's or its containers'. --token on a command
// line is refused.
func TestTokenStaysOffCommandLines(t *testing.T) {
	needExec(t)
	ctx := context.Background()
	homeDir := t.TempDir()
	token := tokenFor(t, homeDir, "alice")
	home := startChild(t, homeDir)
	if _, err := client.New(home.url, token).CreateWorkspace(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	byFile := startChild(t, t.TempDir(), "--home", home.url, "--token-file", tokenFile(t, token))
	byEnv := startChildEnv(t, t.TempDir(), []string{wire.TokenEnv + "=" + token}, "--home", home.url)
	for _, ex := range []*child{byFile, byEnv} {
		// A running exec: its container and the sandbox helper are up
		// while the processes are searched.
		started, done := make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := client.New(ex.url, token).Exec(ctx, "w", wire.ExecRequest{Argv: []string{"sh", "-c", "echo up; sleep 2"}}, func(ev wire.ExecEvent) error {
				if strings.Contains(ev.Data, "up") {
					close(started)
				}
				return nil
			})
			done <- err
		}()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("exec on executor %s: %v", ex.url, err)
		}
		inCmdline, inEnviron := processesHolding(t, token)
		if len(inCmdline) > 0 {
			t.Errorf("the token is in the command line of %v", inCmdline)
		}
		// Only the executor that was given it in its environment holds it there.
		if want := []int{byEnv.cmd.Process.Pid}; fmt.Sprint(inEnviron) != fmt.Sprint(want) {
			t.Errorf("during an exec on %s: the token is in the environment of %v, want %v (the executor given COMPUTER_TOKEN; not the other, helpers or containers)",
				ex.url, inEnviron, want)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// agentctl refuses --token before it calls anything.
	err := agentcmd.Run(ctx, []string{"agentctl", "--server", home.url, "--token", token, "ws", "ls"},
		agentcmd.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "--token is not taken") {
		t.Fatalf("agentctl --token: %v, want it refused", err)
	}
}

// processesHolding lists the processes whose command line, and those
// whose environment, contain secret.
func processesHolding(t *testing.T, secret string) (inCmdline, inEnviron []int) {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // ended meanwhile
		}
		checked++
		if bytes.Contains(cmdline, []byte(secret)) {
			inCmdline = append(inCmdline, pid)
		}
		if environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ")); err == nil && bytes.Contains(environ, []byte(secret)) {
			inEnviron = append(inEnviron, pid)
		}
	}
	if checked < 5 {
		t.Fatalf("read the command lines of only %d processes", checked)
	}
	return inCmdline, inEnviron
}

// TestMetricsOnLoopbackByDefault: computerd serve without --metrics-listen
// serves metrics on 127.0.0.1:7778 only, and its log says so.
func TestMetricsOnLoopbackByDefault(t *testing.T) {
	dir := t.TempDir()
	c := startProcess(t, dir, []string{"COMPUTERD_TEST_RUN=" + strings.Join([]string{"computerd", "serve", "--data", dir,
		"--listen", "127.0.0.1:0", "--no-exec"}, "\x1f")})
	if want := "http://" + daemon.DefaultMetricsListen + "/metrics"; c.metrics != want || daemon.DefaultMetricsListen != "127.0.0.1:7778" {
		t.Fatalf("serve's log names metrics at %q, want %q", c.metrics, want)
	}
	resp, err := http.Get(c.metrics)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", c.metrics, resp.Status)
	}
	// The process's listening sockets on the metrics port: 127.0.0.1 only.
	addrs := listeningOn(t, c.cmd.Process.Pid, 7778)
	if len(addrs) != 1 || addrs[0] != "0100007F" {
		t.Fatalf("sockets listening on port 7778: %v, want 127.0.0.1 (0100007F) alone", addrs)
	}
}

// listeningOn returns the local addresses (as /proc/net/tcp{,6} write
// them) of the sockets in pid's network namespace listening on port.
func listeningOn(t *testing.T, pid, port int) []string {
	t.Helper()
	var addrs []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" { // TCP_LISTEN
				continue
			}
			host, hexPort, _ := strings.Cut(fields[1], ":")
			if p, _ := strconv.ParseInt(hexPort, 16, 32); int(p) == port {
				addrs = append(addrs, host)
			}
		}
		f.Close()
	}
	return addrs
}

// TestUnauthenticatedRequestsAddNoSeries sends requests without a valid
// token to random paths with random methods: /metrics shows no series it
// did not show before (they count in one unlabelled counter). A tenant's
// requests to random paths and methods are labelled by route pattern, and
// none of their raw paths or methods becomes a label value.
func TestUnauthenticatedRequestsAddNoSeries(t *testing.T) {
	e := start(t, api.Limits{})
	e.ok("ws", "create", "w")
	before := scrapeSeries(t, e.d.MetricsURL())
	const n = 300
	auths := []string{"", "Bearer ", "Bearer cdt_" + randomHex(24), "Basic YWxpY2U6c2VjcmV0", "Bearer " + e.token + "x", "garbage"}
	var seen []string // the random parts of paths and methods
	for i := range n {
		path, method, random := randomRequest(i)
		seen = append(seen, random...)
		if code := send(t, e.d.URL(), method, path, auths[i%len(auths)]); code != http.StatusUnauthorized {
			t.Fatalf("%s %s without a valid token: %d, want 401", method, path, code)
		}
	}
	after := scrapeSeries(t, e.d.MetricsURL())
	var added []string
	for s := range after {
		if _, ok := before[s]; !ok {
			added = append(added, s)
		}
	}
	if len(added) > 0 {
		t.Errorf("%d new series after %d unauthenticated requests, such as %q", len(added), n, added[:min(len(added), 5)])
	}
	if got := after["computerd_http_unauthenticated_total"] - before["computerd_http_unauthenticated_total"]; got != n {
		t.Errorf("computerd_http_unauthenticated_total grew by %v, want %d", got, n)
	}

	// A tenant's own random requests: labelled by pattern and method set.
	for i := range 50 {
		path, method, random := randomRequest(n + i)
		seen = append(seen, random...)
		send(t, e.d.URL(), method, path, "Bearer "+e.token)
	}
	page := scrape(t, e.d.MetricsURL())
	for _, s := range seen {
		if strings.Contains(page, s) {
			t.Fatalf("a request's raw %q is on the metrics page", s)
		}
	}
	if !strings.Contains(page, `computerd_http_requests_total{code="404",method="other",route="other"}`) {
		t.Errorf("no series for a tenant's unknown route and method:\n%s", page)
	}
}

// randomRequest is the i-th request to a random path: unknown routes, and
// real routes with unknown names in them; every third with a made-up
// method. random holds the parts made up for it.
func randomRequest(i int) (path, method string, random []string) {
	id, verb := "zq"+randomHex(6), "ZQ"+strings.ToUpper(randomHex(4))
	paths := []string{"/" + id, "/v1/" + id + "/x", "/v1/workspaces/" + id + "/files/" + id, "/v1/sync/" + id + "/push", "/v1/workspaces/" + id + "/log"}
	methods := []string{http.MethodGet, http.MethodPost, verb}
	return paths[i%len(paths)], methods[i%len(methods)], []string{id, verb}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// send makes one request and returns its status.
func send(t *testing.T, base, method, path, auth string) int {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// scrape returns a /metrics page.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// scrapeSeries reads a /metrics page as series (name and labels) and
// their values.
func scrapeSeries(t *testing.T, url string) map[string]float64 {
	t.Helper()
	series := map[string]float64{}
	for _, line := range strings.Split(scrape(t, url), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, _ := strconv.ParseFloat(line[i+1:], 64)
		series[line[:i]] = v
	}
	return series
}
