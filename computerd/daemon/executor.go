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

	mu sync.Mutex
	// accepted holds when the home last accepted each token (by its
	// secret's hash), for the time the home cannot be asked.
	accepted map[[32]byte]time.Time
}

// homeAwayGrace is how long after the home last accepted a token the
// executor still accepts it while it cannot ask the home (down, or out of
// reach): the exec journal stays readable through a short outage. A
// token the home refuses is forgotten at once.
const homeAwayGrace = time.Minute

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
	x := &executor{home: u, store: st, accepted: map[[32]byte]time.Time{}, transport: tr,
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
// executor serves. It asks the home on every request (one round trip,
// beside the pull and push of an exec), so a token revoked at the home is
// refused by the next request; only while the home cannot answer does a
// token it accepted within homeAwayGrace pass (docs/SYNC.md, Tokens).
func (x *executor) authenticate(ctx context.Context, secret string) (string, error) {
	key := sha256.Sum256([]byte(secret))
	h, err := (&syncproto.Client{URL: x.home.String(), Token: secret, HTTP: x.sync.HTTP}).Hello(ctx)
	switch {
	case errors.Is(err, core.ErrBadToken):
		x.forget(key)
		return "", core.ErrBadToken
	case err != nil:
		if x.acceptedLately(key) {
			return x.hello.Tenant, nil
		}
		return "", fmt.Errorf("check token with the home: %w: %w", wire.ErrUnavailable, err)
	case h.Tenant != x.hello.Tenant:
		x.forget(key)
		return "", fmt.Errorf("this executor serves tenant %q, the token is %q's: %w", x.hello.Tenant, h.Tenant, core.ErrBadToken)
	}
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, at := range x.accepted {
		if now.Sub(at) > homeAwayGrace {
			delete(x.accepted, k)
		}
	}
	x.accepted[key] = now
	return h.Tenant, nil
}

// acceptedLately reports whether the home accepted the token of key
// within homeAwayGrace.
func (x *executor) acceptedLately(key [32]byte) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	at, ok := x.accepted[key]
	return ok && time.Since(at) <= homeAwayGrace
}

// forget drops what the executor remembers of a token the home refused.
func (x *executor) forget(key [32]byte) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.accepted, key)
}
