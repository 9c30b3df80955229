# sandboxd — build, test, lint, bench. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/sandboxd
PKGS  := ./...

# golangci-lint is pinned and installed into ./bin from the Go module proxy, so
# every machine and CI lint with the same linters (config: .golangci.yaml).
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT         := $(CURDIR)/bin/golangci-lint
LINTFLAGS             ?= --allow-parallel-runners

# The race detector sleeps 1 s at every test binary's exit by default (so
# reports from other threads can land); a found race still fails the run.
# Without the sleep `make unit` takes ~32 s instead of ~52 s here.
export GORACE ?= atexit_sleep_ms=0

# Image targets (image, test-image, images) live in mk/images.mk.
-include mk/images.mk
# The real API server tier (kube-apiserver, etcd, test-kubeapi) lives in mk/kube.mk.
-include mk/kube.mk
# A real node (kubelet, containerd; kubenode, test-kubenode, bench-kube) lives in mk/kubenode.mk.
-include mk/kubenode.mk

.PHONY: help build build-kubernetes test test-under-load unit e2e lint golangci-lint bench bench-scale run deps clean fuzz runsc

help: ## list targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# The commit `sandboxd version` names when Go's own VCS stamp is off.
COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -modified)

build: ## static binary (CGO off): both roles, serve and agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-X main.commit=$(COMMIT)' -o $(BIN) ./cmd/sandboxd

# The Kubernetes backend links client-go: 24.7 -> 53.0 MB, and every sandboxd
# process (the agent, twice per sandbox) 2.3 MB more anonymous memory, so it
# is a build of its own (decision 0043). Tests, lint and CI build with the tag.
build-kubernetes: ## static binary with the Kubernetes backend (serve --backend kubernetes; -tags kubernetes) at bin/sandboxd-kubernetes
	CGO_ENABLED=0 $(GO) build -trimpath -tags kubernetes -ldflags '-X main.commit=$(COMMIT)' -o $(BIN)-kubernetes ./cmd/sandboxd

deps: ## host packages the tests and benchmarks use (ripgrep for the grep baseline, busybox for the terminal's sh fallback, tmux for the e2e tests of `sandboxd shell`, skopeo to read `sandboxd agent-image`'s output as OCI)
	@command -v rg >/dev/null && command -v busybox >/dev/null && command -v tmux >/dev/null && command -v skopeo >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ripgrep busybox-static tmux skopeo >/dev/null; }

# runsc is opt-in, not part of deps or test: it edits the engine's
# daemon.json and reloads the engine (SIGHUP), which a shared CI engine's
# owner should decide. The e2e tests of runsc skip, saying why, without it.
runsc: ## install Debian's runsc (gVisor) and register it with the local engine as the runtime "runsc" (idempotent; SIGHUP, no restart)
	@$(CURDIR)/mk/runsc.sh

# make test runs the real API server tier too (e2e/kubeapi): the first run on a
# machine builds kube-apiserver (make kube-apiserver, cached after; .ci/run
# starts that build in the background before lint).
test: deps images task-image kube-deps kube-apiserver ## everything, images and kube-apiserver included: unit tests, real-Docker e2e (test, default and task image), the real API server tier, with -race
	SANDBOXD_E2E_REQUIRE_IMAGES=1 SANDBOXD_TEST_BUSYBOX=$$(command -v busybox) $(KUBEAPI_ENV) $(GO) test -tags kubernetes -race -count=1 -timeout 30m $(PKGS)

# Not part of .ci/run: it shows whether the suites hold on a busy machine.
test-under-load: deps images task-image kube-deps kube-apiserver ## `make test` with a CPU hog beside it (stress-ng, 2 CPU workers per core): wall time, load average at start and end
	SANDBOXD_E2E_REQUIRE_IMAGES=1 SANDBOXD_TEST_BUSYBOX=$$(command -v busybox) $(KUBEAPI_ENV) $(CURDIR)/mk/under-load.sh $(GO) test -tags kubernetes -race -count=1 -timeout 30m $(PKGS)

unit: ## unit tests only (no Docker)
	$(GO) test -tags kubernetes -race -count=1 -short $(PKGS)

e2e: deps images task-image ## the real-Docker suites only (e2e/, e2e/api/)
	SANDBOXD_E2E_REQUIRE_IMAGES=1 SANDBOXD_TEST_BUSYBOX=$$(command -v busybox) $(GO) test -tags kubernetes -race -count=1 -timeout 30m ./e2e/...

lint: golangci-lint ## golangci-lint (.golangci.yaml: vet, staticcheck, errcheck, ...), gofmt, go mod tidy
	$(GOLANGCI_LINT) run --build-tags kubernetes $(LINTFLAGS) $(PKGS)
	$(GOLANGCI_LINT) run $(LINTFLAGS) ./server/daemon/
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff

golangci-lint: ## install the pinned golangci-lint into ./bin (only when missing or another version)
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q 'version $(GOLANGCI_LINT_VERSION:v%=%) ' || \
	  { echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into bin/"; \
	    GOBIN=$(CURDIR)/bin $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); }

bench: deps test-image task-image ## benchmarks: a table with ratios against baselines measured in the same run
	$(GO) run ./bench $(BENCHFLAGS)

# The scale suites run only when named (not in `make bench`): SCALESUITES
# picks them, SCALEFLAGS sizes them (docs/benchmarks.md has the commands).
SCALESUITES ?= scale
bench-scale: image test-image ## harness-scale benchmarks (SCALESUITES=scale,scale-work,scale-grep,density,soak; SCALEFLAGS="-scale-n 20"): time to interactive over WebSocket and MCP, sessions working at once, grep vs rg, memory and density, soak
	$(GO) run ./bench -suite $(SCALESUITES) $(SCALEFLAGS)

run: image build ## build the default image and serve on 127.0.0.1:7070
	$(BIN) serve

clean: ## remove build outputs
	rm -rf bin

# FUZZ_TARGETS are the fuzz targets `make fuzz` runs, as package:Func; CI
# calls `make fuzz`. FUZZTIME is a count of executions, not a duration: Go
# 1.26's fuzz coordinator can fail a duration-bounded run with a bare
# "context deadline exceeded" and no crasher when a starved worker is mid-
# call at the deadline (golang/go#75804, fixed in Go 1.27; it failed CI's
# FuzzExtractTar under load). 5000 runs take ~2 s idle, ~15 s on a busy
# 2-core machine. Minimizing a new input is capped (10 runs): by default
# it may take 60 s, more than the whole budget.
FUZZTIME     ?= 5000x
FUZZ_TARGETS := ./agent/proto:FuzzReadFrame ./agent:FuzzExtractTar ./server:FuzzJSONRPC ./skills:FuzzParse ./sandbox/kubernetes/skilltar:FuzzUnpack ./sandbox/egress:FuzzHost ./sandbox/egress:FuzzClientHello

fuzz: ## run each fuzz target for FUZZTIME executions (default 5000x) past its seed corpus
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10x "$${t%%:*}"; \
	done
