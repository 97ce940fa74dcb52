package wire

// VersionInfo is the answer of GET /v1/version: the build of the
// computerd that answers and, when the request carries a valid token,
// who the token is. It is the one route that answers without a token
// (then with the build only); a token that is sent must be valid.
type VersionInfo struct {
	Version  string `json:"version"`            // computerd's build (internal/version.String)
	Revision string `json:"revision,omitempty"` // the commit it was built from, when known
	Go       string `json:"go"`                 // the Go release it was built with
	API      string `json:"api"`                // the API version of every path (Version)

	Tenant  string   `json:"tenant,omitempty"`   // the token's tenant
	TokenID string   `json:"token_id,omitempty"` // the token's id (computerd token ls), not its secret
	Scopes  []string `json:"scopes,omitempty"`   // what the token may do beyond its tenant's workspaces
}
