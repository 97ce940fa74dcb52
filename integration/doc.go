// Package integration holds end-to-end tests: a real computerd (in-process
// or as a child process) on a random loopback port with a temporary data
// directory, driven through agentctl's own command code.
package integration
