GO ?= go
BIN := bin

.PHONY: build install test bench demo clean deps importcheck mcp-inspector

# VERSION is what computerd --version, agentctl --version, GET /v1/version
# and computerd_build_info report (without it, a binary reports the commit
# go build recorded, or "devel").
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X computerd/internal/version.version=$(VERSION) -X computerd/internal/version.revision=$(REVISION)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/computerd ./computerd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/computerd-sandbox ./computerd/sandboxd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/agentctl ./agentctl

# install: the three binaries into $(PREFIX)/bin (computerd finds
# computerd-sandbox beside itself).
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/computerd $(BIN)/computerd-sandbox $(BIN)/agentctl $(DESTDIR)$(PREFIX)/bin/

deps:
	./contrib/deps.sh

# importcheck: the import rules of docs/ARCHITECTURE.md (make test runs it).
importcheck:
	./contrib/importcheck.sh

test: deps importcheck build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	./contrib/mcp-inspector-test.sh
	DEMO=.demo-test PORT=17787 ./contrib/demo.sh > .demo-test.log 2>&1 || { cat .demo-test.log; exit 1; }
	@tail -3 .demo-test.log

# mcp-inspector: the MCP inspector's CLI (npm, pinned) against both
# transports of the MCP server (make test runs it after the Go tests).
mcp-inspector:
	./contrib/mcp-inspector-test.sh

bench:
	$(GO) run ./bench -suite all -json

# demo: computerd on a fresh data dir, driven through agentctl: files,
# execs, history, fork and restore, kill -9, a host mount, an agent run
# (make test runs it too).
demo: deps build
	./contrib/demo.sh

clean:
	rm -rf $(BIN) .demo .demo-test .demo-test.log
