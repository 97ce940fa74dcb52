// Package core holds computerd's shared domain types: workspaces,
// revisions, ops, changesets, stats, exec records, the path rules and the
// sentinel errors. It depends on the standard library only, so that the
// store (fsstore), the sync protocol, the HTTP bodies (wire) and the thin
// client (agentctl) can all speak the same types without linking each other.
package core
