# The two commands of the README: `make demo` and `make test`. Both set up
# everything they need on a fresh machine (hack/setup.sh is idempotent).
SHELL  := /bin/bash
GO     ?= go
BIN    := bin/hardway
export HARDWAY_MIRROR ?= /var/tmp/hardway/mirror

.PHONY: build setup lint unit e2e test mirror demo bench fuzz clean

build:
	$(GO) build -o $(BIN) ./cmd/hardway

setup:
	@bash hack/setup.sh

lint: setup
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	bin/staticcheck ./...

# Release mirror built from source (etcd, Kubernetes) for the lab: cached per
# version, seconds when warm.
mirror: setup
	bash hack/mirror/build.sh

# Unit tests and the tests against a real sshd (as root).
unit: setup
	$(GO) test -count=1 ./pkg/... ./internal/... .

# Real hosts (systemd-nspawn), real binaries: needs root and the mirror.
e2e: setup build mirror
	$(GO) test -count=1 -p 1 -timeout 40m ./tests/...

test: lint unit e2e

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./pkg/inventory/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./pkg/...

demo: setup build mirror
	@echo "make demo: not every step exists yet; see README"

clean:
	rm -rf bin
