# The real API server tier (T3, e2e/kubeapi; docs/decisions/0045): kube-apiserver
# built from k8s.io/kubernetes through the Go module proxy (tools module mk/kube),
# etcd from Debian's etcd-server. The binary is cached outside the tree, keyed by
# version, so a machine builds it once; a fresh CI machine builds it every run.

KUBE_VERSION       := v1.37.2
KUBE_CACHE         ?= $(HOME)/.cache/sandboxd/kube
KUBE_APISERVER     := $(KUBE_CACHE)/kube-apiserver-$(KUBE_VERSION)
# The build's own log: `time` of the go build (wall, user, sys, peak RSS).
KUBE_APISERVER_LOG := $(KUBE_CACHE)/kube-apiserver-$(KUBE_VERSION).log
# Without the version stamp /version answers v0.0.0-master.
KUBE_LDFLAGS := -s -w \
  -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
  -X k8s.io/component-base/version.gitMajor=1 \
  -X k8s.io/component-base/version.gitMinor=37

.PHONY: kube-apiserver kube-deps test-kubeapi

kube-apiserver: $(KUBE_APISERVER) ## build kube-apiserver (v1.37.2) from the Go module proxy into ~/.cache/sandboxd/kube (tools module mk/kube), once per machine

# Built into a temporary name and renamed, so a killed build leaves no binary
# that looks whole. nice 19: the build is long and must not starve the tests.
$(KUBE_APISERVER): mk/kube/go.mod mk/kube/go.sum
	@mkdir -p $(KUBE_CACHE)
	@echo "building kube-apiserver $(KUBE_VERSION) into $(KUBE_CACHE) (log: $(KUBE_APISERVER_LOG))"
	cd mk/kube && /usr/bin/time -f 'kube-apiserver build: %e s wall, %U s user, %S s sys, %M KB peak RSS' -o $(KUBE_APISERVER_LOG) \
	  nice -n 19 env CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(KUBE_APISERVER).tmp k8s.io/kubernetes/cmd/kube-apiserver
	@cat $(KUBE_APISERVER_LOG)
	mv $(KUBE_APISERVER).tmp $(KUBE_APISERVER)

kube-deps: ## Debian's etcd-server (etcd for the T3 tier)
	@command -v etcd >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null; }

# What the T3 tests need to find their binaries, and the order that a missing
# one fails them rather than skipping (CI must run this tier).
KUBEAPI_ENV := SANDBOXD_KUBE_APISERVER=$(KUBE_APISERVER) SANDBOXD_KUBEAPI_REQUIRE=1

test-kubeapi: kube-deps kube-apiserver test-image ## the real API server tier alone (e2e/kubeapi): kube-apiserver + etcd on loopback, with -race
	$(KUBEAPI_ENV) $(GO) test -tags kubernetes -race -count=1 -timeout 20m ./e2e/kubeapi/
