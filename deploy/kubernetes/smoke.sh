#!/usr/bin/env bash
# smoke.sh: a check you run against a real cluster (kubectl's current
# context) that sandboxd's Kubernetes runtime works there. It applies the
# manifests of this folder with your agent image, makes the token Secret,
# waits for the daemon, runs a command in a session through the sandboxd
# CLI, checks the session Pod's security fields while it runs, checks that
# nothing is left after, and removes everything it applied (the namespaces
# sandboxd and sandboxd-sessions: do not run it where those hold anything
# of yours). It prints each check and exits 1 at the first that fails.
#
# usage: deploy/kubernetes/smoke.sh AGENT_IMAGE
#   AGENT_IMAGE  where you pushed the image `bin/sandboxd-kubernetes agent-image`
#                wrote (docs/kubernetes.md: the daemon runs from it too, so it
#                must be the build with the backend), e.g.
#                registry.example.com/sandboxd-agent:v1
# environment:
#   SESSION_IMAGE              the session's image (default docker.io/library/bash:5.2)
#   NETWORK_POLICY_ENFORCED=1  (required) declare that the cluster's network
#                              plugin enforces NetworkPolicies. Every session's
#                              network is one, so without the declaration the
#                              daemon refuses to start (fail closed): run this
#                              only on a cluster that enforces them.
#   AGENT_VOLUME=init          for clusters without image volumes (before
#                              Kubernetes 1.35, containerd before 2.1)
#   KEEP=1                     leave everything applied, for a look after
# needs: kubectl, curl, and the sandboxd CLI on PATH (or SANDBOXD=path).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
agent_image=${1:?usage: $0 AGENT_IMAGE (where you pushed sandboxd agent-image)}
session_image=${SESSION_IMAGE:-docker.io/library/bash:5.2}
sandboxd=${SANDBOXD:-sandboxd}
ns=sandboxd
sessions=sandboxd-sessions

ok() { echo "ok:   $*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
if [ "${NETWORK_POLICY_ENFORCED:-}" != 1 ]; then
  echo "smoke: set NETWORK_POLICY_ENFORCED=1, and only on a cluster whose network plugin enforces" >&2
  echo "NetworkPolicies: without the declaration the daemon refuses to start (--kube-network-policy-enforced)" >&2
  exit 2
fi
for c in kubectl curl "$sandboxd"; do
  command -v "$c" >/dev/null || fail "$c is not on PATH"
done
echo "cluster: $(kubectl config current-context) ($(kubectl version -o json | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p' | tail -n 1))"

for n in $ns $sessions; do
  if kubectl get namespace "$n" >/dev/null 2>&1; then
    fail "namespace $n exists already: this script would delete it at the end; remove it or run elsewhere"
  fi
done

# The manifests with your image, and the operator's declaration if given.
rendered=$(mktemp)
pf_pid=
cleanup() {
  [ -n "$pf_pid" ] && kill "$pf_pid" 2>/dev/null || true
  if [ "${KEEP:-}" = 1 ]; then
    echo "KEEP=1: left applied ($rendered)"
    return
  fi
  kubectl delete --ignore-not-found --wait=false -f "$rendered" >/dev/null 2>&1 || true
  rm -f "$rendered"
}
trap cleanup EXIT
for f in namespaces.yaml rbac.yaml deployment.yaml service.yaml; do
  cat "$here/$f"
  echo "---"
done | sed -e "s#REGISTRY/sandboxd-agent:TAG#$agent_image#g" \
  -e "s#^\(\s*\)- --state-dir=/var/lib/sandboxd#&\n\1- --image=$session_image#" \
  -e "s#--kube-agent-volume=image#--kube-agent-volume=${AGENT_VOLUME:-image}#" \
  >"$rendered"
sed -i 's/^\(\s*\)# - --kube-network-policy-enforced/\1- --kube-network-policy-enforced/' "$rendered"

kubectl apply -f "$rendered" >/dev/null
ok "applied the manifests (namespaces, ServiceAccount, Role, RoleBinding, Deployment, Service)"
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
kubectl -n $ns create secret generic sandboxd-token --from-literal=token="$token" >/dev/null
ok "made the token Secret"
kubectl -n $ns rollout status deployment/sandboxd --timeout=300s >/dev/null ||
  fail "the daemon did not become ready in 5 min: kubectl -n $ns describe pod; kubectl -n $ns logs deploy/sandboxd"
ok "the daemon is ready (its Pod passed the namespace's restricted level)"

port=$((20000 + RANDOM % 20000))
kubectl -n $ns port-forward svc/sandboxd "$port:7070" >/dev/null 2>&1 &
pf_pid=$!
for _ in $(seq 50); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null || fail "no /healthz through kubectl port-forward"
ok "/healthz answers through the Service"
export SANDBOXD_URL="ws://127.0.0.1:$port/v1/ws" SANDBOXD_TOKEN="$token"

# A session that lives long enough to look at its Pod from outside.
out_file=$(mktemp)
"$sandboxd" run --timeout 120s -- 'id -u; grep CapEff /proc/self/status; touch /probe 2>/dev/null && echo root-writable || echo root-read-only; sleep 20; echo done' >"$out_file" 2>&1 &
run_pid=$!
pod=
for _ in $(seq 150); do
  pod=$(kubectl -n $sessions get pods -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
  [ -n "$pod" ] && break
  sleep 0.4
done
[ -n "$pod" ] || fail "no session Pod appeared in $sessions in 60 s"
ok "the session's Pod is $sessions/$pod"
kubectl -n $sessions wait --for=condition=Ready "pod/$pod" --timeout=120s >/dev/null || fail "Pod $pod not ready: kubectl -n $sessions describe pod $pod"
field() { kubectl -n $sessions get pod "$pod" -o jsonpath="$1"; }
check() { # check NAME JSONPATH WANT
  got=$(field "$2")
  [ "$got" = "$3" ] || fail "$1: $2 is '$got', want '$3'"
  ok "$1 ($2 = $3)"
}
check "no ServiceAccount token" '{.spec.automountServiceAccountToken}' false
check "never restarted" '{.spec.restartPolicy}' Never
check "non-root" '{.spec.containers[0].securityContext.runAsNonRoot}' true
check "no privilege escalation" '{.spec.containers[0].securityContext.allowPrivilegeEscalation}' false
check "read-only root" '{.spec.containers[0].securityContext.readOnlyRootFilesystem}' true
check "every capability dropped" '{.spec.containers[0].securityContext.capabilities.drop[0]}' ALL
seccomp=$(field '{.spec.securityContext.seccompProfile.type}{.spec.containers[0].securityContext.seccompProfile.type}')
case $seccomp in RuntimeDefault* | Localhost*) ok "seccomp $seccomp" ;; *) fail "seccomp is '$seccomp'" ;; esac
for r in cpu memory ephemeral-storage; do
  v=$(field "{.spec.containers[0].resources.limits.$r}")
  [ -n "$v" ] || fail "no $r limit"
  ok "$r limit $v"
done
[ -n "$(kubectl -n $sessions get networkpolicy -o name)" ] || fail "no NetworkPolicy for the session"
ok "the session has a NetworkPolicy"

wait "$run_pid" || fail "sandboxd run failed: $(cat "$out_file")"
out=$(cat "$out_file")
rm -f "$out_file"
echo "$out" | grep -qx 1000 || fail "the command did not run as uid 1000: $out"
ok "the command ran as uid 1000"
echo "$out" | grep -q 'CapEff:\s*0000000000000000' || fail "the command had capabilities: $out"
ok "the command had no capabilities"
echo "$out" | grep -qx root-read-only || fail "the root filesystem was writable: $out"
ok "the root filesystem was read-only"
echo "$out" | grep -qx done || fail "the command did not finish: $out"

for _ in $(seq 50); do
  [ -z "$(kubectl -n $sessions get pods,networkpolicies -o name 2>/dev/null)" ] && break
  sleep 0.2
done
left=$(kubectl -n $sessions get pods,networkpolicies -o name 2>/dev/null)
left="$left$(kubectl -n $sessions get configmaps -l sandboxd.managed=true -o name 2>/dev/null)"
[ -z "$left" ] || fail "left after the session closed: $left"
ok "nothing left in $sessions after the session closed"
echo "smoke: passed"
