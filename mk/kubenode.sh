#!/usr/bin/env bash
# A real Kubernetes node on this machine (docs/decisions/0049): etcd,
# kube-apiserver and kube-scheduler on loopback, Debian's containerd as a
# second daemon (its own root, state and socket; the CRI plugin on), Debian's
# CNI bridge plugin, and a kubelet built from k8s.io/kubernetes. Pods really
# run: containerd, runc, the kubelet's cgroups. Not part of `make test` or CI:
# `make kubenode` brings it up, `make test-kubenode` and `make bench-kube` use
# it, `make kubenode-down` removes all of it.
#
#   mk/kubenode.sh up      start everything, wait for the Node Ready
#   mk/kubenode.sh agent   (re)import the agent image from $SANDBOXD_BIN
#   mk/kubenode.sh down    stop everything and remove what up made
#   mk/kubenode.sh status  what runs
#
# Environment (the Makefile sets the first two):
#   KUBE_APISERVER, KUBELET, KUBE_SCHEDULER  the binaries (make kube-apiserver, kubelet, kube-scheduler)
#   SANDBOXD_BIN             the static sandboxd binary (make build): agent-image
#   KUBENODE_DIR             everything up makes (default /var/lib/sandboxd-kubenode)
#   KUBENODE_TEST_IMAGE      the session image imported from Docker (sandboxd-test:latest)
#
# What the node needs that a laptop cluster would not, found by running it
# (the decision record has each error):
#   - kubelet >= 1.35 refuses cgroup v1 unless failCgroupV1: false;
#   - a negative oom_score_adj cannot be set on this machine (EIO, even as
#     root), so containerd's CRI clamps it (restrict_oom_score_adj);
#   - the node IP cannot be loopback: docker0's address is used, and the
#     kubelet listens only there;
#   - containerd 1.6 has no user namespaces and no image volumes: sessions
#     run with --kube-host-users and --kube-agent-volume init.
set -euo pipefail

D=${KUBENODE_DIR:-/var/lib/sandboxd-kubenode}
NODE=sandboxd-kubenode
NS=sandboxd-kubenode
BRIDGE=kubenode0
POD_SUBNET=10.244.0.0/24
CNI_NET=sandboxd-kubenode
ETCD_PORT=23790
ETCD_PEER_PORT=23800
API_PORT=16443
SCHEDULER_PORT=10259
TOKEN=sandboxd-kubenode-admin-token
SOCK=$D/containerd/containerd.sock
PAUSE_IMAGE=docker.io/library/sandboxd-kubenode-pause:1
AGENT_IMAGE=docker.io/library/sandboxd-agent:kubenode
TEST_IMAGE=${KUBENODE_TEST_IMAGE:-sandboxd-test:latest}
HERE=$(cd "$(dirname "$0")" && pwd)

say() { echo "kubenode: $*"; }
die() {
	echo "kubenode: $*" >&2
	exit 1
}
ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }
kctl() { kubectl --kubeconfig "$D/kubeconfig" "$@"; }
elapsed() { echo "$(($(date +%s) - T0)) s"; }

# start NAME CMD...: a process of its own session (so a ^C of make does not
# reach it), output to NAME.log, its pid in run/NAME.pid.
start() {
	local name=$1
	shift
	setsid "$@" >"$D/log/$name.log" 2>&1 </dev/null &
	echo $! >"$D/run/$name.pid"
}

# alive NAME: the process up started under NAME still runs.
alive() {
	local f=$D/run/$1.pid
	[[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# stop NAME: SIGTERM, then SIGKILL after 20 s, by the pid up recorded.
stop() {
	local f=$D/run/$1.pid pid
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 200); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$f"
}

# wait_for WHAT SECONDS CMD...: retry CMD every 0.5 s; on time out print the
# logs' ends and fail.
wait_for() {
	local what=$1 secs=$2
	shift 2
	local deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		if (($(date +%s) > deadline)); then
			for l in "$D"/log/*.log; do
				echo "--- $l" >&2
				tail -n 15 "$l" >&2
			done
			die "$what: not within $secs s"
		fi
		sleep 0.5
	done
}

node_ip() {
	ip -4 -o addr show docker0 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}'
}

need() {
	[[ $(id -u) == 0 ]] || die "must run as root (containerd, the kubelet's cgroups, the CNI bridge)"
	[[ -x ${KUBE_APISERVER:-} ]] || die "KUBE_APISERVER is not an executable (make kube-apiserver)"
	[[ -x ${KUBELET:-} ]] || die "KUBELET is not an executable (make kubelet)"
	[[ -x ${KUBE_SCHEDULER:-} ]] || die "KUBE_SCHEDULER is not an executable (make kube-scheduler)"
	[[ -x ${SANDBOXD_BIN:-} ]] || die "SANDBOXD_BIN is not an executable (make build)"
	local c
	for c in etcd containerd containerd-shim-runc-v2 runc ctr kubectl docker go ip iptables; do
		command -v "$c" >/dev/null || die "$c is missing (make kubenode-deps)"
	done
	[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
		die "the CNI plugins are missing in /usr/lib/cni (make kubenode-deps)"
	[[ -n $(node_ip) ]] || die "no IPv4 address on docker0 (the node's IP)"
}

write_configs() {
	local ip=$1
	mkdir -p "$D"/{run,log,etcd,certs,cni/net.d,cni/ipam,containerd/root,containerd/state,kubelet,pod-logs,bin}

	cat >"$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # The kubelet asks -998 for the Pod sandbox; this machine refuses any
  # negative oom_score_adj (EIO), and runc then fails every sandbox with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
EOF

	# A bridge with host-local addresses and no masquerade: Pods reach this
	# host and each other; forwarding beyond meets Docker's FORWARD policy
	# DROP (not tried: nothing here sends traffic off this machine).
	# The bridge plugin does not enforce NetworkPolicies.
	cat >"$D/cni/net.d/10-$CNI_NET.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET"}]],
        "dataDir": "$D/cni/ipam"
      }
    }
  ]
}
EOF

	printf '%s,kubenode-admin,kubenode-admin,"system:masters"\n' "$TOKEN" >"$D/tokens.csv"
	chmod 600 "$D/tokens.csv"
	[[ -f $D/sa.key ]] || openssl ecparam -name prime256v1 -genkey -noout -out "$D/sa.key" 2>/dev/null

	cat >"$D/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubenode
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $D/certs/apiserver.crt
users:
- name: kubenode-admin
  user:
    token: $TOKEN
contexts:
- name: kubenode
  context:
    cluster: kubenode
    user: kubenode-admin
    namespace: $NS
current-context: kubenode
EOF
	chmod 600 "$D/kubeconfig"

	# The kubelet serves exec, logs and stats on the node IP only; the
	# apiserver does not verify its self-signed certificate, and the kubelet
	# lets anyone on this host in (anonymous, AlwaysAllow): a test node.
	cat >"$D/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
failSwapOn: false
podLogsDir: $D/pod-logs
serializeImagePulls: false
registerNode: true
maxPods: 110
EOF
}

up() {
	need
	T0=$(date +%s)
	if alive kubelet || alive kube-scheduler || alive kube-apiserver || alive etcd || alive containerd; then
		die "already up (mk/kubenode.sh down first); $(status 2>&1 | tr '\n' ' ')"
	fi
	local ip
	ip=$(node_ip)
	write_configs "$ip"

	say "containerd ($(containerd --version | awk '{print $3}')), root $D/containerd"
	start containerd containerd --config "$D/containerd/config.toml"
	wait_for "containerd" 60 ctr_ version

	say "images: pause (built here), the agent ($SANDBOXD_BIN), $TEST_IMAGE (docker save) [$(elapsed)]"
	(cd "$HERE/.." && CGO_ENABLED=0 go build -trimpath -o "$D/bin/pause" mk/kubenode/pause.go)
	"$SANDBOXD_BIN" agent-image --binary "$D/bin/pause" --tag "${PAUSE_IMAGE#docker.io/library/}" --tar - 2>/dev/null | ctr_ images import - >/dev/null
	agent
	docker save "$TEST_IMAGE" | ctr_ images import - >/dev/null

	say "etcd ($(etcd --version | awk 'NR==1{print $3}')) and kube-apiserver on 127.0.0.1 [$(elapsed)]"
	start etcd etcd --name kubenode --data-dir "$D/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "kubenode=http://127.0.0.1:$ETCD_PEER_PORT" --logger zap --log-level warn
	start kube-apiserver "$KUBE_APISERVER" \
		--etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
		--secure-port "$API_PORT" --cert-dir "$D/certs" \
		--token-auth-file "$D/tokens.csv" --authorization-mode RBAC \
		--enable-admission-plugins PodSecurity \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$D/sa.key" --service-account-signing-key-file "$D/sa.key" \
		--service-cluster-ip-range 10.96.0.0/24 \
		--kubelet-preferred-address-types InternalIP --profiling=false
	wait_for "kube-apiserver /readyz" 180 kctl get --raw /readyz

	# The scheduler places the Pods that name no node (a daemon's); it
	# serves its health on loopback only.
	start kube-scheduler "$KUBE_SCHEDULER" --kubeconfig "$D/kubeconfig" \
		--authentication-kubeconfig "$D/kubeconfig" --authorization-kubeconfig "$D/kubeconfig" \
		--leader-elect=false --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT"

	# No controller-manager: the namespace's default ServiceAccount is made
	# here (the ServiceAccount admission plugin refuses Pods without it).
	kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $NS
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: default
  namespace: $NS
EOF

	say "kubelet ($("$KUBELET" --version 2>/dev/null | awk '{print $2}')), node $NODE at $ip [$(elapsed)]"
	start kubelet "$KUBELET" --config "$D/kubelet/config.yaml" --kubeconfig "$D/kubeconfig" \
		--root-dir "$D/kubelet" --cert-dir "$D/kubelet/pki" \
		--hostname-override "$NODE" --node-ip "$ip" --v 1
	wait_for "Node $NODE registered" 180 kctl get node "$NODE"
	wait_for "Node $NODE Ready" 300 kctl wait --for=condition=Ready "node/$NODE" --timeout=5s
	# The apiserver's TaintNodesByCondition admission registers the Node
	# tainted not-ready; the controller-manager's node lifecycle controller
	# (not run here) lifts it once Ready. Without this the scheduler places
	# nothing ("1 node(s) had untolerated taint(s)").
	kctl taint node "$NODE" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true

	cat >"$D/node.env" <<EOF
# Written by mk/kubenode.sh up: what e2e/kubenode and bench -suite kube read.
KUBECONFIG=$D/kubeconfig
NODE=$NODE
NAMESPACE=$NS
CONTAINERD_ADDRESS=$SOCK
AGENT_IMAGE=$AGENT_IMAGE
TEST_IMAGE=docker.io/library/$TEST_IMAGE
BRIDGE_GATEWAY=${POD_SUBNET%.0/24}.1
SCHEDULER=kube-scheduler
EOF
	say "Node $NODE Ready in $(elapsed): KUBECONFIG=$D/kubeconfig (namespace $NS, enforce=restricted)"
	kctl get node "$NODE" -o wide
}

# agent imports the agent image (the static binary at $SANDBOXD_BIN) under
# AGENT_IMAGE's tag, replacing the one there.
agent() {
	[[ -x ${SANDBOXD_BIN:-} ]] || die "SANDBOXD_BIN is not an executable (make build)"
	"$SANDBOXD_BIN" agent-image --binary "$SANDBOXD_BIN" --tag "${AGENT_IMAGE#docker.io/library/}" --tar - 2>/dev/null |
		ctr_ images import - >/dev/null
}

status() {
	local p
	for p in containerd etcd kube-apiserver kube-scheduler kubelet; do
		if alive "$p"; then echo "$p: running (pid $(cat "$D/run/$p.pid"))"; else echo "$p: not running"; fi
	done
	if alive kube-apiserver; then kctl get node -o wide 2>&1 || true; fi
}

# pids_of_shims: the containerd shims of this node's containerd (they outlive
# it), found by its socket path, which is this node's alone.
pids_of_shims() {
	local p
	for p in /proc/[0-9]*; do
		{ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -q -- "-address $SOCK " && echo "${p#/proc/}"
	done
	return 0
}

down() {
	T0=$(date +%s)
	# Without the folder there is no process of ours to stop; what the
	# kernel holds (bridge, chains, cgroups) is still looked for.
	mkdir -p "$D/run"
	# Pods first, through the kubelet, so their sandboxes are torn down by
	# the CNI plugin as on a real node.
	if alive kube-apiserver && alive kubelet; then
		kctl delete pods --all --all-namespaces --grace-period 0 --force --wait=false >/dev/null 2>&1 || true
		local deadline=$(($(date +%s) + 60))
		while alive containerd && [[ -n $(ctr_ tasks ls -q 2>/dev/null) ]] && (($(date +%s) < deadline)); do
			sleep 1
		done
	fi
	stop kubelet
	local netns=() id
	if alive containerd; then
		# What the kubelet did not end: every task killed, every container
		# removed; the sandboxes' network namespaces are removed below.
		for id in $(ctr_ containers ls -q 2>/dev/null); do
			mapfile -t -O "${#netns[@]}" netns < <(ctr_ containers info "$id" 2>/dev/null | grep -o '/var/run/netns/cni-[0-9a-f-]*' | sort -u)
			ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
		done
		for id in $(ctr_ containers ls -q 2>/dev/null); do
			ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true
			ctr_ containers rm "$id" >/dev/null 2>&1 || true
		done
	fi
	stop containerd
	local shims
	shims=$(pids_of_shims)
	[[ -z $shims ]] || kill -9 $shims 2>/dev/null || true
	stop kube-scheduler
	stop kube-apiserver
	stop etcd

	# The CNI results the sandboxes left, their network namespaces, the bridge.
	local ns
	for ns in "${netns[@]}"; do
		ip netns del "$(basename "$ns")" 2>/dev/null || true
	done
	rm -f /var/lib/cni/results/"$CNI_NET"-*
	ip link del "$BRIDGE" 2>/dev/null || true

	# The kubelet's iptables chains (KUBE-KUBELET-CANARY, KUBE-FIREWALL, ...):
	# references first, then the chains.
	local ipt t c
	for ipt in iptables ip6tables; do
		for t in filter nat mangle; do
			{ "$ipt" -t "$t" -S 2>/dev/null || true; } | { grep -E '^-A .* -j KUBE-' || true; } | sed 's/^-A/-D/' | while read -r rule; do
				eval "$ipt -t $t $rule" 2>/dev/null || true
			done
			for c in $({ "$ipt" -t "$t" -S 2>/dev/null || true; } | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
				"$ipt" -t "$t" -F "$c" 2>/dev/null || true
				"$ipt" -t "$t" -X "$c" 2>/dev/null || true
			done
		done
	done

	# The kubelet's cgroups (cgroupfs driver): kubepods and below, deepest first.
	local sub
	for sub in /sys/fs/cgroup/*/kubepods; do
		[[ -d $sub ]] || continue
		find "$sub" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done

	# Mounts under the node's folder (emptyDirs, rootfs, shm), deepest first.
	{ findmnt -rn -o TARGET | grep -F "$D/" || true; } | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$D"
	say "removed in $(elapsed)"
	local left
	left=$(ls -d /sys/fs/cgroup/*/kubepods 2>/dev/null || true)
	[[ -z $left ]] || say "left: $left"
}

case ${1:-} in
up) up ;;
down) down ;;
agent) agent ;;
status) status ;;
*) die "usage: $0 up|down|agent|status" ;;
esac
