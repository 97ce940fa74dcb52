package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"computerd/computerd/runner"
	"computerd/core"
	"computerd/fsstore"
	"computerd/syncproto"
	"computerd/wire"
)

// executor is what a daemon started with --home needs: the home's
// protocol parameters, a proxy for the API calls it does not serve, and a
// token check that asks the home.
type executor struct {
	home  *url.URL
	hello syncproto.Hello
	sync  *syncproto.Client
	proxy http.Handler
	store *fsstore.Store
	// transport carries every call to the home; close drops its idle
	// connections (and their goroutines).
	transport *http.Transport

	mu    sync.Mutex
	known map[[32]byte]knownToken
}

type knownToken struct {
	tenant string
	until  time.Time
}

// newExecutor checks the home and sets the store's chunk size to the home's
// (chunk hashes must agree); the store is not open yet.
func newExecutor(ctx context.Context, cfg Config, st *fsstore.Store) (*executor, error) {
	u, err := homeURL(cfg.Home)
	if err != nil {
		return nil, err
	}
	if cfg.HomeToken == "" {
		return nil, errors.New("--home needs a token of the tenant this executor serves: in a file named by --token-file, or in " + wire.TokenEnv)
	}
	tr, err := wire.NewTransport(cfg.HomeCA)
	if err != nil {
		return nil, fmt.Errorf("--home-ca: %w", err)
	}
	x := &executor{home: u, store: st, known: map[[32]byte]knownToken{}, transport: tr,
		sync: &syncproto.Client{URL: cfg.Home, Token: cfg.HomeToken, HTTP: &http.Client{Transport: tr}}}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if x.hello, err = x.sync.Hello(hctx); err != nil {
		x.close()
		return nil, fmt.Errorf("home %s: %w", cfg.Home, err)
	}
	st.ChunkSize = int(x.hello.ChunkSize)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = tr
	x.proxy = proxy
	return x, nil
}

// close drops the idle connections to the home (once the API and the
// runner, which call it, have stopped).
func (x *executor) close() { x.transport.CloseIdleConnections() }

// check refuses a store made with another chunk size than the home's.
func (x *executor) check(st *fsstore.Store) error {
	if st.ChunkSizeBytes() != x.hello.ChunkSize {
		return fmt.Errorf("this data dir uses %d-byte chunks, the home %d: use a fresh data dir for the executor", st.ChunkSizeBytes(), x.hello.ChunkSize)
	}
	return nil
}

// runner is the runner's Remote: mirrors in the local store, pushes home.
func (x *executor) runner() *runner.Remote {
	return &runner.Remote{
		Mirror: &syncproto.Mirror{Client: x.sync, Store: x.store, Tenant: x.hello.Tenant},
	}
}

// authenticate accepts a token the home accepts for the tenant this
// executor serves (answers are cached for a minute).
func (x *executor) authenticate(ctx context.Context, secret string) (string, error) {
	key := sha256.Sum256([]byte(secret))
	x.mu.Lock()
	k, ok := x.known[key]
	x.mu.Unlock()
	if ok && time.Now().Before(k.until) {
		return k.tenant, nil
	}
	h, err := (&syncproto.Client{URL: x.home.String(), Token: secret, HTTP: x.sync.HTTP}).Hello(ctx)
	if errors.Is(err, core.ErrBadToken) {
		return "", core.ErrBadToken
	}
	if err != nil {
		return "", fmt.Errorf("check token with the home: %w", err)
	}
	if h.Tenant != x.hello.Tenant {
		return "", fmt.Errorf("this executor serves tenant %q, the token is %q's: %w", x.hello.Tenant, h.Tenant, core.ErrBadToken)
	}
	x.mu.Lock()
	x.known[key] = knownToken{tenant: h.Tenant, until: time.Now().Add(time.Minute)}
	x.mu.Unlock()
	return h.Tenant, nil
}
