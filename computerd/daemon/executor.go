package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
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
	// transport carries every call to the home the executor makes itself,
	// each bounded by the home timeout (homeTransport); passOn the API
	// calls it passes on for a client, which that client bounds. close
	// drops their idle connections (and their goroutines).
	transport, passOn *http.Transport
	// away is why the home could not be reached at the start (nil: it was).
	away error

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

// DefaultHomeTimeout is how long an executor's call to its home may go
// without progress (--home-timeout; docs/SYNC.md, Deadlines).
const DefaultHomeTimeout = 30 * time.Second

// newExecutor checks the home and sets the store's chunk size to the home's
// (chunk hashes must agree); the store is not open yet. A home that
// cannot be reached does not stop an executor whose data dir met it
// before: check then takes what the store recorded of it.
func newExecutor(ctx context.Context, cfg Config, st *fsstore.Store) (*executor, error) {
	u, err := homeURL(cfg.Home)
	if err != nil {
		return nil, err
	}
	if cfg.HomeToken == "" {
		return nil, errors.New("--home needs a token of the tenant this executor serves: in a file named by --token-file, or in " + wire.TokenEnv)
	}
	timeout := cfg.HomeTimeout
	if timeout <= 0 {
		timeout = DefaultHomeTimeout
	}
	base, err := wire.NewTransport(cfg.HomeCA)
	if err != nil {
		return nil, fmt.Errorf("--home-ca: %w", err)
	}
	x := &executor{home: u, store: st, accepted: map[[32]byte]time.Time{}, transport: homeTransport(base, timeout), passOn: base}
	x.sync = &syncproto.Client{URL: cfg.Home, Token: cfg.HomeToken, HTTP: &http.Client{Transport: x.transport}}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	x.hello, err = x.sync.Hello(hctx)
	switch {
	case err == nil:
		st.ChunkSize = int(x.hello.ChunkSize)
	case errors.Is(err, syncproto.ErrUnreachable) && storeExists(cfg.DataDir):
		x.away = err // check decides
	default:
		x.close()
		return nil, fmt.Errorf("home %s: %w", cfg.Home, err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = x.passOn
	x.proxy = proxy
	return x, nil
}

// close drops the idle connections to the home (once the API and the
// runner, which call it, have stopped).
func (x *executor) close() {
	x.transport.CloseIdleConnections()
	x.passOn.CloseIdleConnections()
}

// check refuses a store made with another chunk size than the home's, and
// records in the store what the handshake said of the home. When the home
// could not be reached, it takes that record instead: the executor
// starts, its pending pushes wait for the home, and a data dir that never
// met its home does not start.
func (x *executor) check(ctx context.Context, st *fsstore.Store, log *slog.Logger) error {
	if x.away != nil {
		h, err := st.ExecutorHome(ctx)
		if err != nil {
			return err
		}
		if h.Tenant == "" {
			return fmt.Errorf("home %s: %w (this data dir has never reached its home: it needs the home once, for its chunk size and tenant)", x.home, x.away)
		}
		x.hello = syncproto.Hello{Version: syncproto.Version, ChunkSize: st.ChunkSizeBytes(), Tenant: h.Tenant}
		log.Warn("the home cannot be reached: starting without it; pending pushes wait for it, and no exec starts until it is back",
			"home", x.home.String(), "tenant", h.Tenant, "err", x.away)
		return nil
	}
	if st.ChunkSizeBytes() != x.hello.ChunkSize {
		return fmt.Errorf("this data dir uses %d-byte chunks, the home %d: use a fresh data dir for the executor", st.ChunkSizeBytes(), x.hello.ChunkSize)
	}
	return st.SetExecutorHome(ctx, fsstore.ExecutorHome{URL: x.home.String(), Tenant: x.hello.Tenant})
}

// storeExists reports whether dir holds a store already.
func storeExists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "store.db"))
	return err == nil
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
