#!/usr/bin/env bash
# make runsc: install Debian's runsc (gVisor) if missing and register it with
# the local Docker engine as the runtime "runsc" (decision 0024). Idempotent;
# says what it did. The engine is reloaded with SIGHUP (runtimes are live-
# reloadable), never restarted: running containers are not touched.
#
#   RUNSC_DAEMON_JSON   the engine's config (default /etc/docker/daemon.json)
#   RUNSC_DRY_RUN=1     say what would change, change nothing
set -euo pipefail

daemon_json=${RUNSC_DAEMON_JSON:-/etc/docker/daemon.json}
dry=${RUNSC_DRY_RUN:-}

say() { echo "runsc: $*"; }
fail() { echo "runsc: $*" >&2; exit 1; }

case "${DOCKER_HOST:-unix://}" in
unix://*) ;;
*) fail "DOCKER_HOST=$DOCKER_HOST is not a local engine: register runsc on that engine's host (see docs/security.md)" ;;
esac

# 1. The binary.
if path=$(command -v runsc); then
	say "installed: $path ($(runsc --version 2>/dev/null | head -1))"
elif [ -n "$dry" ]; then
	say "would install Debian's runsc package"; path=/usr/bin/runsc
else
	[ "$(id -u)" = 0 ] || fail "runsc is not installed and installing it needs root (apt-get install runsc)"
	say "installing Debian's runsc package"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null ||
		fail "apt-get install runsc failed (not packaged for this release or architecture?)"
	path=$(command -v runsc) || fail "runsc still not on PATH after installing"
	say "installed: $path"
fi

# 2. Already registered? Then nothing to do.
# The runtime is registered with gVisor's own network stack off
# (--network=none): sessions of the network mode "none" (the default) lose
# nothing, the sandbox makes no host network syscalls at all, and runsc
# 20221219 (Debian's) refuses its sandbox network on kernels that show
# net.core.rmem_default in every namespace (it takes that for the root
# namespace). sandboxd refuses other network modes under such a runtime.
# --oci-seccomp: gVisor applies the container's seccomp profile (sandboxd's,
# without io_uring) inside the sandbox too; without it runsc ignores it.
args='["--network=none", "--oci-seccomp"]'
engine_has() { docker info --format '{{json .Runtimes}}' 2>/dev/null | ARGS="$args" python3 -c 'import json,os,sys; r=json.load(sys.stdin).get("runsc"); sys.exit(0 if r and r.get("runtimeArgs", []) == json.loads(os.environ["ARGS"]) else 1)'; }
docker info >/dev/null 2>&1 || fail "the Docker engine does not answer"
if engine_has; then
	say "the engine has the runtime runsc (runtimeArgs $args) already: nothing to do"
	exit 0
fi

# 3. Merge {"runtimes": {"runsc": {"path": ..., "runtimeArgs": ...}}} into daemon.json, keeping
# every other key as it is; written to a temporary file and renamed.
[ -n "$dry" ] || [ -w "$(dirname "$daemon_json")" ] || fail "cannot write $daemon_json (needs root)"
changed=$(RUNSC_ARGS="$args" RUNSC_PATH="$path" DAEMON_JSON="$daemon_json" DRY="$dry" python3 - <<'PY'
import json, os, sys
p, path = os.environ["DAEMON_JSON"], os.environ["RUNSC_PATH"]
cfg = {}
if os.path.exists(p):
    with open(p) as f:
        text = f.read()
    cfg = json.loads(text) if text.strip() else {}
rts = cfg.setdefault("runtimes", {})
want = {"path": path, "runtimeArgs": json.loads(os.environ["RUNSC_ARGS"])}
if rts.get("runsc") == want:
    print("unchanged"); sys.exit(0)
rts["runsc"] = want
if os.environ["DRY"]:
    print("would write " + json.dumps(cfg)); sys.exit(0)
tmp = p + ".sandboxd-tmp"
with open(tmp, "w") as f:
    json.dump(cfg, f)
    f.write("\n")
if os.path.exists(p):
    st = os.stat(p); os.chmod(tmp, st.st_mode & 0o7777)
os.replace(tmp, p)
print("written")
PY
) || fail "could not update $daemon_json (is it valid JSON?)"
say "$daemon_json: $changed"
[ -z "$dry" ] || exit 0

# 4. Reload the engine's configuration (SIGHUP; no restart) and wait for it.
pid=$(pidof dockerd) || fail "no dockerd process to reload: restart the engine yourself to pick up $daemon_json"
say "reloading dockerd (kill -HUP $pid)"
kill -HUP "$pid"
for _ in $(seq 50); do
	if engine_has; then say "registered: docker run --runtime runsc ... works now; serve --runtime runsc makes it every session's default"; exit 0; fi
	sleep 0.2
done
fail "the engine did not pick up the runtime after a reload (see its log); $daemon_json has it for the next engine start"
