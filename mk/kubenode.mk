# A real Kubernetes node on this machine (docs/decisions/0049): a kubelet
# built from the tools module mk/kube beside kube-apiserver, Debian's
# containerd and CNI plugins, Pods run by runc. A hand tier: not part of
# `make test` or CI. mk/kubenode.sh does the work; docs/kubernetes.md, "A real
# node on one machine", has the commands and how long each takes.

KUBELET            := $(KUBE_CACHE)/kubelet-$(KUBE_VERSION)
KUBELET_LOG        := $(KUBE_CACHE)/kubelet-$(KUBE_VERSION).log
KUBE_SCHEDULER     := $(KUBE_CACHE)/kube-scheduler-$(KUBE_VERSION)
KUBE_SCHEDULER_LOG := $(KUBE_CACHE)/kube-scheduler-$(KUBE_VERSION).log
KUBENODE_DIR ?= /var/lib/sandboxd-kubenode
KUBENODE_ENV := KUBE_APISERVER=$(KUBE_APISERVER) KUBELET=$(KUBELET) KUBE_SCHEDULER=$(KUBE_SCHEDULER) \
  SANDBOXD_BIN=$(CURDIR)/$(BIN) KUBENODE_DIR=$(KUBENODE_DIR)

.PHONY: kubelet kube-scheduler kubenode-deps kubenode kubenode-down kubenode-status test-kubenode bench-kube

kubelet: $(KUBELET) ## build the kubelet (v1.37.2) from the Go module proxy into ~/.cache/sandboxd/kube (tools module mk/kube), once per machine

# As kube-apiserver (mk/kube.mk): a temporary name renamed when whole, nice 19.
$(KUBELET): mk/kube/go.mod mk/kube/go.sum
	@mkdir -p $(KUBE_CACHE)
	@echo "building kubelet $(KUBE_VERSION) into $(KUBE_CACHE) (log: $(KUBELET_LOG))"
	cd mk/kube && /usr/bin/time -f 'kubelet build: %e s wall, %U s user, %S s sys, %M KB peak RSS' -o $(KUBELET_LOG) \
	  nice -n 19 env CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(KUBELET).tmp k8s.io/kubernetes/cmd/kubelet
	@cat $(KUBELET_LOG)
	mv $(KUBELET).tmp $(KUBELET)

kube-scheduler: $(KUBE_SCHEDULER) ## build kube-scheduler (v1.37.2) the same way, for the real node (its packages are mostly the kubelet's and the apiserver's: about a minute after them)

$(KUBE_SCHEDULER): mk/kube/go.mod mk/kube/go.sum
	@mkdir -p $(KUBE_CACHE)
	@echo "building kube-scheduler $(KUBE_VERSION) into $(KUBE_CACHE) (log: $(KUBE_SCHEDULER_LOG))"
	cd mk/kube && /usr/bin/time -f 'kube-scheduler build: %e s wall, %U s user, %S s sys, %M KB peak RSS' -o $(KUBE_SCHEDULER_LOG) \
	  nice -n 19 env CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(KUBE_SCHEDULER).tmp k8s.io/kubernetes/cmd/kube-scheduler
	@cat $(KUBE_SCHEDULER_LOG)
	mv $(KUBE_SCHEDULER).tmp $(KUBE_SCHEDULER)

kubenode-deps: kube-deps ## Debian's containerd, runc and CNI plugins (the real node's runtime and network)
	@command -v containerd >/dev/null && command -v runc >/dev/null && test -x /usr/lib/cni/bridge || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd runc containernetworking-plugins >/dev/null; }

kubenode: kubenode-deps kube-apiserver kubelet kube-scheduler build test-image ## bring up a real node (etcd, kube-apiserver, kube-scheduler, containerd, kubelet; root) and wait for it Ready: make kubenode-down removes it
	$(KUBENODE_ENV) bash mk/kubenode.sh up

kubenode-down: ## stop the real node and remove all it made (processes, folders, Pods' network namespaces, bridge, iptables chains, cgroups)
	KUBENODE_DIR=$(KUBENODE_DIR) bash mk/kubenode.sh down

kubenode-status: ## what of the real node runs
	KUBENODE_DIR=$(KUBENODE_DIR) bash mk/kubenode.sh status

# The node's kubeconfig is what the tests look for; without it they skip.
KUBENODE_TEST_ENV := SANDBOXD_KUBENODE_KUBECONFIG=$(KUBENODE_DIR)/kubeconfig

test-kubenode: ## the e2e security and executor suites against Pods on the real node (make kubenode first), with -race
	$(KUBENODE_TEST_ENV) $(GO) test -tags kubernetes -race -count=1 -timeout 30m -v ./e2e/kubenode/

bench-kube: build ## time to interactive and a burst of 20 creates, real node vs Docker, in one run (make kubenode first)
	$(KUBENODE_TEST_ENV) $(GO) run -tags kubernetes ./bench -agent $(BIN) -suite kube $(BENCHFLAGS)
