#!/usr/bin/env bash
# sigtrace.sh: who sends SIGKILL or SIGSTOP to a sandbox's agent or its
# init, from the kernel's own record (the signal:signal_generate
# tracepoint, with the sender and the kernel stack of each signal).
#
# A session that dies with exit 137 says only "SIGKILL": the engine's
# events name its own kills (docker kill, rm -f), not a kill from inside
# the sandbox, from the kernel (OOM killer, a pid namespace's teardown)
# or from another host process. The tracepoint names them all. Issue 23's
# fork bomb reset (exit 137 once, on a busy machine) is why.
#
#   sigtrace.sh start LOG   start recording into LOG (prints the instance)
#   sigtrace.sh stop LOG    stop, and print the report of LOG
#   sigtrace.sh report LOG  print the report of LOG
#
# The agent's process is named "exe" (init starts it as /proc/self/exe),
# init and agent-proxy "sandboxd". Needs root and tracefs; without them it
# says so and exits 0, so a caller goes on without it.
set -uo pipefail

cmd=${1:-}
log=${2:-}
[ -n "$cmd" ] && [ -n "$log" ] || { echo "usage: $0 start|stop|report LOG" >&2; exit 2; }

tracefs=/sys/kernel/tracing
say() { echo "sigtrace: $*"; }

start() {
	if [ "$(id -u)" != 0 ]; then
		say "not recording (needs root for tracefs)"
		return 0
	fi
	[ -d "$tracefs/instances" ] || mount -t tracefs nodev "$tracefs" 2>/dev/null
	if [ ! -d "$tracefs/instances" ]; then
		say "not recording (no tracefs at $tracefs)"
		return 0
	fi
	# An instance of its own: the global buffer and other recorders are
	# left alone, and two runs at once do not share one.
	inst=$tracefs/instances/sandboxd-sigtrace-$$
	mkdir "$inst" 2>/dev/null || { say "not recording (cannot make $inst)"; return 0; }
	echo "$inst" >"$log.inst"
	ev=$inst/events/signal/signal_generate
	if [ ! -d "$ev" ]; then
		say "not recording (no signal:signal_generate tracepoint)"
		rmdir "$inst" 2>/dev/null
		return 0
	fi
	echo 4096 >"$inst/buffer_size_kb"
	echo '(sig == 9 || sig == 19) && (comm == "sandboxd" || comm == "exe")' >"$ev/filter"
	echo 1 >"$inst/options/stacktrace"
	echo 1 >"$ev/enable"
	# Wall clock and trace clock side by side, to place the events in time.
	echo "# start wall=$(date -u +%s.%N) uptime=$(cut -d' ' -f1 /proc/uptime)" >"$log"
	setsid cat "$inst/trace_pipe" >>"$log" 2>/dev/null </dev/null &
	echo $! >"$log.pid"
	say "recording SIGKILL/SIGSTOP to sandboxd processes into $log"
}

stop() {
	if [ -f "$log.pid" ]; then
		kill "$(cat "$log.pid")" 2>/dev/null
		rm -f "$log.pid"
	fi
	if [ -f "$log.inst" ]; then
		inst=$(cat "$log.inst")
		echo 0 >"$inst/events/signal/signal_generate/enable" 2>/dev/null
		rmdir "$inst" 2>/dev/null
		rm -f "$log.inst"
	fi
	[ -f "$log" ] && report
}

# report sorts each recorded signal by who sent it. The engine's kills
# (runc, containerd-shim, dockerd) and a pid namespace's teardown after
# its init ended are how every session ends; the rest is listed whole. A
# host (global) OOM kill is told apart from a memory limit's: Docker's
# OOMKilled sees only the latter.
report() {
	[ -f "$log" ] || { say "no log $log"; return 0; }
	awk -v logf="$log" '
	/^# start / { split($3, w, "="); split($4, u, "="); off = w[2] - u[2]; next }
	/signal_generate:/ {
		flush()
		line = $0; sub(/^ +/, "", line)
		sender = $1; sub(/-[0-9]+$/, "", sender)
		ts = ""; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) { ts = substr($i, 1, length($i) - 1) }
		stack = ""; pending = 1; next
	}
	pending && /=>/ { fn = $2; if (fn !~ /^(trace_event_raw|__traceiter|__send_signal|send_signal|do_send_sig|entry_SYSCALL|do_syscall_64|x64_sys_call)/) stack = stack (stack == "" ? "" : " < ") fn; next }
	function flush(   kind) {
		if (!pending) return
		pending = 0; n++
		if (sender ~ /^(runc|containerd-shim|containerd|dockerd)/) kind = "engine"
		else if (stack ~ /zap_pid_ns_processes/) kind = "teardown"
		else if (stack ~ /oom_kill/ && stack ~ /mem_cgroup_out_of_memory/) kind = "oom"
		else if (stack ~ /oom_kill/) kind = "globaloom"
		else kind = "other"
		count[kind]++
		if (kind != "engine" && kind != "teardown") {
			cmd = "date -u -d @" int(off + ts) " +%T"; cmd | getline when; close(cmd)
			detail[kind] = detail[kind] sprintf("    %s UTC %s\n      kernel: %s\n", when, line, stack)
		}
	}
	END {
		flush()
		printf "sigtrace: %d SIGKILL/SIGSTOP to processes named \"sandboxd\" (init and agent-proxy of a sandbox, a daemon) or \"exe\" (the agent); log %s\n", n, logf
		printf "  by the engine (docker kill, rm -f):           %d\n", count["engine"]
		printf "  by a pid namespace ending (its init exited):  %d\n", count["teardown"]
		printf "  by the OOM killer, at a memory limit (memcg): %d\n", count["oom"]
		printf "  by the OOM killer, the host out of memory:    %d\n", count["globaloom"]
		printf "  by anything else:                             %d\n", count["other"]
		printf "%s%s%s", detail["globaloom"], detail["oom"], detail["other"]
	}' "$log"
}

case $cmd in
start) start ;;
stop) stop ;;
report) report ;;
*) echo "usage: $0 start|stop|report LOG" >&2; exit 2 ;;
esac
