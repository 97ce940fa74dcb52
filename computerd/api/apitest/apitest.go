// Package apitest serves computerd's real HTTP API over a fresh store, for
// black-box tests of the packages that speak to it (the tools, the MCP
// server): no exec, one tenant.
package apitest

import (
	"context"
	"net/http/httptest"
	"testing"

	"computerd/client"
	"computerd/computerd/api"
	"computerd/fsstore"
)

// Serve starts the API on a fresh store in tb's temporary directory and
// returns a client for tenant "alice", who owns the named workspaces.
// tb.Cleanup stops the server and closes the store.
func Serve(tb testing.TB, workspaces ...string) *client.Client {
	tb.Helper()
	ctx := context.Background()
	st := fsstore.New(tb.TempDir())
	if err := st.Open(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	srv := httptest.NewServer((&api.Server{Store: st}).Handler())
	tb.Cleanup(srv.Close)
	token, _, err := st.CreateToken(ctx, "alice")
	if err != nil {
		tb.Fatal(err)
	}
	for _, ws := range workspaces {
		if _, err := st.CreateWorkspace(ctx, "alice", ws); err != nil {
			tb.Fatal(err)
		}
	}
	return client.New(srv.URL, token)
}
