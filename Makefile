# The two commands of the README: `make demo` and `make test`. Both set up
# everything they need on a fresh machine (hack/setup.sh is idempotent) and
# build the release mirror from source once (cached under $HARDWAY_MIRROR).
SHELL  := /bin/bash
GO     ?= go
BIN    := bin/hardway
export HARDWAY_MIRROR ?= /var/tmp/hardway/mirror

.PHONY: build setup lint mirror unit e2e test demo bench bench-up bench-scale bench-backup bench-upgrade conformance-build conformance-images conformance cis-build cis docs fuzz clean

build:
	$(GO) build -o $(BIN) ./cmd/hardway

setup:
	@bash hack/setup.sh

lint: setup
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	bin/staticcheck ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit the result"; exit 1; }
	$(GO) run ./hack/doccheck

# etcd and Kubernetes built from source through the Go module proxy, laid out
# like the official download sites. Cold ~15-30 min on 2 cores; warm: seconds.
# The upgrade test (tests/e2e/upgrade_test.go) starts a cluster on the minor before the
# default: only its Kubernetes binaries are built (etcd, the worker parts and the images
# are the default's, which that minor runs too).
export HARDWAY_PREVIOUS_K8S ?= v1.35.4
mirror: setup
	bash hack/mirror/build.sh
	K8S_VERSION=$(HARDWAY_PREVIOUS_K8S) bash hack/mirror/build.sh kubernetes

# Unit tests (with the race detector), the real-sshd tests (as root), real etcd, and the rendered
# flags checked against the real binaries' --help.
unit: setup mirror
	$(GO) test -race -count=1 -timeout 30m ./pkg/... ./internal/... ./hack/... .

# Real hosts (systemd-nspawn + systemd + sshd) and real binaries, as root. TestControlPlane,
# TestEtcdCA, TestWorkers, TestUpgrade and TestConformance (the upstream suite's subset) run
# side by side, two at a time (own lab prefixes and /24s).
# The summary lines go to the terminal; on a failure, every failing test's whole message too (the
# lines under each `_test.go:` line of a test that failed), since CI keeps only what was printed.
e2e: setup build mirror conformance-build conformance-images cis-build
	@HARDWAY_E2E_PARALLEL=1 $(GO) test -count=1 -p 1 -timeout 75m -v ./tests/... 2>&1 | tee /tmp/hardway-e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go:'; \
	rc=$${PIPESTATUS[0]}; [ $$rc -eq 0 ] || bash hack/e2e-failures.sh /tmp/hardway-e2e.log; exit $$rc

# The lab's base rootfs (debootstrap: mostly waits on the network and the disk, 2-3 min cold) builds
# in the background while lint, the mirror and the unit tests keep the cores busy; the e2e labs
# find it built (or wait on its lock). Warm, it is a stat.
test: setup build
	@$(BIN) lab base >/tmp/hardway-lab-base.log 2>&1 & base=$$!; \
	$(MAKE) --no-print-directory lint unit e2e; rc=$$?; \
	wait $$base || { echo "hardway lab base failed (the labs then build it themselves):"; cat /tmp/hardway-lab-base.log; }; \
	exit $$rc

# The CLI reference in docs/cli/, one page per command, generated from the command tree
# (internal/cli's TestCLIReferenceIsCurrent fails in `make unit` when it is out of date).
docs:
	rm -rf docs/cli && $(GO) run ./hack/clidocs docs/cli

demo: setup build
	bash hack/lab-demo.sh

# The upstream conformance suite's binaries (e2e.test, ginkgo): the official kubernetes-test
# tarball's, or built from the mirror's Kubernetes source release where dl.k8s.io cannot be
# reached; not part of `make mirror` (a cold source build takes long on 2 cores).
conformance-build: setup mirror
	bash hack/conformance/build.sh

# kube-bench (the CIS Kubernetes Benchmark's checks) with the release's benchmarks, and gojq for
# its policies checks, built from source beside the mirror; hack/cis/run.sh runs it on lab hosts.
# Cold ~2-4 min on 2 cores; warm: seconds.
cis-build: setup
	bash hack/cis/build.sh

# kube-bench on every host of the lab `make demo` made (LAB_DIR, default lab/): one JSON per host
# and a summary line per host in $HARDWAY_CIS_RESULTS (default /var/tmp/hardway/cis-results/<time>).
# TestWorkers runs the same on its own lab and fails on any FAIL.
LAB_DIR ?= lab
cis: setup cis-build
	@[ -s $(LAB_DIR)/ssh_config ] || { echo "no lab in $(LAB_DIR)/ (make demo makes one; LAB_DIR=DIR for another)"; exit 1; }
	bash hack/cis/run.sh -F $(LAB_DIR)/ssh_config -k $(LAB_DIR)/.hardway/kubeconfigs/admin.kubeconfig \
	  $$(awk '$$1 == "Host" && $$2 != "*" {print $$2}' $(LAB_DIR)/ssh_config)

# The suite's images, made with no registry (root: debootstrap); cached like the mirror.
conformance-images: setup conformance-build
	bash hack/conformance/images.sh

# The whole [Conformance] focus, [Serial] included, on a 3 + 2 lab (root); about an hour on
# 2 cores. The JUnit report, the e2e log and summary.json go to HARDWAY_CONFORMANCE_RESULTS
# (default: /var/tmp/hardway/conformance-results/<time>).
conformance: setup build mirror conformance-build conformance-images
	@HARDWAY_CONFORMANCE=full $(GO) test -count=1 -timeout 200m -v -run '^TestConformance$$' ./tests/e2e/ 2>&1 | tee /tmp/hardway-conformance.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go:'; exit $${PIPESTATUS[0]}

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./pkg/inventory/

# The figures of docs/benchmarks.md, measured side by side in one run.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./pkg/pki ./pkg/release ./pkg/remote ./pkg/units

# The up figures: cold and no-op `hardway up` against the tutorial's
# scp + systemctl, on two sets of fresh lab hosts (root).
bench-up: setup build mirror
	bash hack/bench-up.sh

# The scale figures only: 3 controllers + 1, 3 and 9 workers (root).
bench-scale: setup build mirror
	SCALE=1 bash hack/bench-up.sh

bench-backup: setup build mirror
	bash hack/bench-backup.sh

# The upgrade's figures: a 3 + 2 lab moved from the previous minor to the default under the
# pollers of tests/e2e/upgrade_test.go: control plane and workers, the longest /readyz poll (root).
bench-upgrade: setup build mirror
	@$(GO) test -count=1 -timeout 45m -v -run '^TestUpgrade$$' ./tests/e2e/ 2>&1 | tee /tmp/hardway-bench-upgrade.log | grep -E 'FIGURE|poller on|^(--- |ok|FAIL)'; exit $${PIPESTATUS[0]}

clean:
	rm -rf bin
