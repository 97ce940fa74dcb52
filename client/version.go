package client

import (
	"context"

	"computerd/wire"
)

// Version asks computerd for its build and, when the client has a
// token, who the token is (GET /v1/version).
func (c *Client) Version(ctx context.Context) (wire.VersionInfo, error) {
	var out wire.VersionInfo
	return out, c.Call(ctx, "GET", "/v1/version", nil, nil, &out)
}
