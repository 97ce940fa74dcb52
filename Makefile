GO ?= go
BIN := bin

.PHONY: build test bench demo clean deps importcheck mcp-inspector

build:
	$(GO) build -o $(BIN)/computerd ./computerd
	$(GO) build -o $(BIN)/computerd-sandbox ./computerd/sandboxd
	$(GO) build -o $(BIN)/agentctl ./agentctl

deps:
	./contrib/deps.sh

# importcheck: the import rules of docs/ARCHITECTURE.md (make test runs it).
importcheck:
	./contrib/importcheck.sh

test: deps importcheck
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	./contrib/mcp-inspector-test.sh

# mcp-inspector: the MCP inspector's CLI (npm, pinned) against both
# transports of the MCP server (make test runs it after the Go tests).
mcp-inspector:
	./contrib/mcp-inspector-test.sh

bench:
	$(GO) run ./bench -suite all -json

# demo: start computerd on a fresh data dir and drive a workspace with agentctl.
demo: deps build
	./contrib/demo.sh

clean:
	rm -rf $(BIN) .demo
