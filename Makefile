GO ?= go
BIN := bin
DEMO_DATA := .demo/data

.PHONY: build test bench demo clean

build:
	$(GO) build -o $(BIN)/computerd ./computerd

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

bench:
	$(GO) run ./bench -suite store -json

# demo: import a small tree into a fresh data dir, change a file, show log, diff and fsck.
demo: build
	rm -rf .demo && mkdir -p .demo/src/pkg
	printf 'package pkg\n\nfunc Hello() string { return "hello" }\n' > .demo/src/pkg/hello.go
	printf '# demo\n' > .demo/src/README.md
	$(BIN)/computerd store import --data $(DEMO_DATA) demo .demo/src
	printf 'package pkg\n\nfunc Hello() string { return "hello, world" }\n' > .demo/src/pkg/hello.go
	$(BIN)/computerd store import --data $(DEMO_DATA) demo .demo/src
	$(BIN)/computerd store log --data $(DEMO_DATA) demo
	$(BIN)/computerd store diff --data $(DEMO_DATA) demo 2 3
	$(BIN)/computerd store diff --stat --data $(DEMO_DATA) demo 2 3
	$(BIN)/computerd store fsck --all --hashes --data $(DEMO_DATA)

clean:
	rm -rf $(BIN) .demo
