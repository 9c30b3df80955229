# shellcheck shell=bash
# Shared helpers for the image build scripts in this folder. Sourced, not run.
#
# Nothing here names a Debian mirror: the mirror is read from the machine's own
# apt configuration (apt-get indextargets), or from SANDBOXD_DEBIAN_MIRROR /
# SANDBOXD_DEBIAN_SECURITY_MIRROR when set.

# Label keys recorded on every image built here (inherited by containers, so they
# stay outside the sandboxd.managed/session/instance keys the daemon owns).
# shellcheck disable=SC2034 # used by the scripts that source this file
SANDBOXD_LABEL_RECIPE=sandboxd.image.recipe
# shellcheck disable=SC2034
SANDBOXD_LABEL_KIND=sandboxd.image.kind

# Elapsed times count from the outermost script (build-default-image.sh runs
# build-base-image.sh and passes its start time down).
_sbx_t0=${SANDBOXD_BUILD_T0:-${EPOCHREALTIME/[.,]/}}
export SANDBOXD_BUILD_T0=$_sbx_t0
_sbx_step="starting"

# step MSG: announce a build step with the elapsed time since the script started.
step() {
	_sbx_step=$*
	local now=${EPOCHREALTIME/[.,]/}
	local us=$((now - _sbx_t0))
	printf '[%4d.%01ds] %s\n' $((us / 1000000)) $(((us / 100000) % 10)) "$*"
}

# elapsed: seconds since the script started, one decimal.
elapsed() {
	local now=${EPOCHREALTIME/[.,]/}
	local us=$((now - _sbx_t0))
	printf '%d.%01d' $((us / 1000000)) $(((us / 100000) % 10))
}

die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# on_error is installed as the ERR trap: name the step and the command that failed.
on_error() {
	local rc=$? line=$1 cmd=$2
	printf 'error: step "%s" failed (exit %d) at %s line %s: %s\n' \
		"$_sbx_step" "$rc" "${0##*/}" "$line" "$cmd" >&2
	exit "$rc"
}

need_root() {
	[ "$(id -u)" -eq 0 ] || die "${0##*/} must run as root (it installs packages, unpacks a root filesystem and chowns files to uid 1000); try: sudo $0"
}

need_docker() {
	command -v docker >/dev/null 2>&1 || die "docker CLI not found in PATH"
	docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
		die "cannot reach the Docker engine (is dockerd running, is DOCKER_HOST right?)"
}

# apt_noninteractive: environment for apt/dpkg that never reads stdin.
export DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true

# ensure_apt_lists: run apt-get update when the host's package lists are empty.
ensure_apt_lists() {
	if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
		step "apt package lists are empty: apt-get update"
		local out
		if ! out=$(apt-get update -qq </dev/null 2>&1); then
			printf '%s\n' "$out" | redact >&2
			die "apt-get update failed: check the machine's apt sources and network"
		fi
	fi
}

# ensure_cmd CMD PACKAGE: install PACKAGE with apt-get when CMD is missing.
ensure_cmd() {
	command -v "$1" >/dev/null 2>&1 && return 0
	step "$1 is missing: apt-get install -y $2"
	ensure_apt_lists
	local out
	if ! out=$(apt-get install -y -qq --no-install-recommends "$2" </dev/null 2>&1); then
		printf '%s\n' "$out" | redact >&2
		die "apt-get install $2 failed"
	fi
	command -v "$1" >/dev/null 2>&1 || die "$1 still not found after installing $2"
}

# apt_repo_uri LABEL: the first repository URI in the host's apt configuration whose
# Release file carries Label: LABEL ("Debian" or "Debian-Security").
apt_repo_uri() {
	# shellcheck disable=SC2016 # $(LABEL) is apt's format syntax, not a shell expansion
	apt-get indextargets --format '$(LABEL) $(REPO_URI)' 'Created-By: Packages' 2>/dev/null |
		awk -v want="$1" '$1 == want { print $2; exit }'
}

# Build output must not name the mirror host (logs end up in CI transcripts):
# add_redaction URL registers URL's host, redact filters stdin.
_sbx_redact=()
add_redaction() {
	local host=${1#*://}
	host=${host%%/*}
	host=${host##*@}
	[ -n "$host" ] || return 0
	host=$(printf '%s' "$host" | sed 's/[][\.*^$#/]/\\&/g')
	_sbx_redact+=(-e "s#${host}#<mirror>#g")
}
# redact_apt_sources: register every repository host of the machine's apt sources.
redact_apt_sources() {
	local uri
	# shellcheck disable=SC2016 # $(REPO_URI) is apt's format syntax
	for uri in $(apt-get indextargets --format '$(REPO_URI)' 2>/dev/null | sort -u); do
		add_redaction "$uri"
	done
}
redact() {
	if [ "${#_sbx_redact[@]}" -eq 0 ]; then cat; else sed -u "${_sbx_redact[@]}"; fi
}

# candidate_versions PKG...: "PKG=VERSION" per line, the versions apt would install
# (one apt-cache call: on hosts without a package cache each call costs ~0.7 s).
candidate_versions() {
	apt-cache policy "$@" 2>/dev/null |
		awk '/^[^ ].*:$/ { pkg = substr($0, 1, length($0) - 1) } $1 == "Candidate:" && $2 != "(none)" { print pkg "=" $2 }'
}

# image_label IMAGE KEY: the value of label KEY on IMAGE, empty when absent.
image_label() {
	docker image inspect --format "{{index .Config.Labels \"$2\"}}" "$1" 2>/dev/null || true
}

# image_id IMAGE: the image ID, empty when absent.
image_id() {
	docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true
}

# sweep_dangling KIND: remove untagged images of KIND (sandboxd.image.kind) left by
# earlier builds. docker refuses to remove one a container still uses; that is fine,
# a later build sweeps it.
sweep_dangling() {
	local id
	for id in $(docker image ls -q --filter dangling=true --filter "label=$SANDBOXD_LABEL_KIND=$1"); do
		docker image rm "$id" >/dev/null 2>&1 || true
	done
}

sha256_of() {
	sha256sum | cut -c1-64
}

# image_size_mb IMAGE: the image size in MB (10^6 bytes, as `docker images` shows it).
image_size_mb() {
	local bytes
	bytes=$(docker image inspect --format '{{.Size}}' "$1")
	echo $(((bytes + 500000) / 1000000))
}

# lock NAME: serialise builds of the same image on this machine.
lock() {
	local f=${TMPDIR:-/tmp}/sandboxd-image-$1.lock
	exec {_sbx_lock_fd}>"$f" || die "cannot open lock file $f"
	if ! flock -n "$_sbx_lock_fd"; then
		step "another build of $1 is running; waiting for it"
		flock "$_sbx_lock_fd"
	fi
}

# parse_args "$@": the arguments every build script takes. Sets force (1 for
# --force, else 0); -h or --help prints the script's header comment (line 2 up
# to `set -E`) and exits.
parse_args() {
	# shellcheck disable=SC2034 # force is read by the script that calls this
	force=0
	local arg
	for arg in "$@"; do
		case $arg in
		--force) force=1 ;;
		-h | --help)
			sed -n '2,/^set -E/{/^set -E/d;s/^# \{0,1\}//;p}' "$0"
			exit 0
			;;
		*) die "unknown argument: $arg (try --help)" ;;
		esac
	done
}
