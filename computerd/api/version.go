package api

import (
	"net/http"

	"computerd/internal/version"
	"computerd/wire"
)

// versionRoute answers GET /v1/version: the build of this computerd, to
// anyone (agentctl status shows it beside a token's trouble), and, for a
// request that sends a token, who the token is. A token that is sent must
// be valid: a wrong one answers 401 here as on every route.
func (s *Server) versionRoute() http.Handler {
	build := wire.VersionInfo{Version: version.String(), Revision: version.Revision(), Go: version.Go(), API: wire.Version}
	withToken := s.wrap("GET /v1/version", func(w http.ResponseWriter, r *http.Request) error {
		info := build
		tok := tokenOf(r.Context())
		info.Tenant, info.TokenID, info.Scopes = tok.Tenant, tok.ID, tok.Scopes
		return writeJSON(w, http.StatusOK, info)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			withToken.ServeHTTP(w, r)
			return
		}
		// No tenant stands behind it: like a refused call, it adds no
		// labelled series to the metrics.
		_ = writeJSON(w, http.StatusOK, build)
	})
}
