#!/usr/bin/env bash
# Build sandboxd-base:bookworm, a Debian root filesystem imported without a registry:
#   1. debootstrap --variant=minbase from the machine's own apt mirror, with every
#      package of images/default/packages.txt, into a temporary folder;
#   2. apt-get upgrade inside it from $suite-updates and $suite-security, then drop
#      docs, caches and what debootstrap copied from the host;
#   3. tar | docker import.
# Skipped when the image exists with the same recipe hash (label sandboxd.image.recipe).
# build-default-image.sh runs this first; run it alone to refresh only the base.
#
# Usage: build-base-image.sh [--force]
#   --force     rebuild even when up to date (picks up new Debian updates)
# Environment:
#   SANDBOXD_BASE_IMAGE             image name (sandboxd-base:bookworm)
#   SANDBOXD_DEBIAN_SUITE           Debian suite to debootstrap (bookworm)
#   SANDBOXD_IMAGE_EXTRA_PACKAGES   more packages, e.g. "build-essential python3-dev"
#   SANDBOXD_DEBIAN_MIRROR          mirror URL; default: the Debian archive in the
#                                   machine's apt sources
#   SANDBOXD_DEBIAN_SECURITY_MIRROR security archive URL; default: from apt sources
#                                   ("none" skips security updates)
#   SANDBOXD_IMAGE_CACHE            where downloaded .deb files are kept for the next
#                                   build (/var/cache/sandboxd/debs; "none": nowhere)
#   SANDBOXD_IMAGE_TMPFS            "no": build the root filesystem on disk even when
#                                   4 GiB of memory are free (default: in a 3 GiB tmpfs)
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR

base=${SANDBOXD_BASE_IMAGE:-sandboxd-base:bookworm}
suite=${SANDBOXD_DEBIAN_SUITE:-bookworm}
context=$here/default
parse_args "$@"

# Package list: packages.txt without comments, plus the extras, sorted and unique.
mapfile -t packages < <(
	{
		sed 's/#.*//' "$context/packages.txt"
		echo "${SANDBOXD_IMAGE_EXTRA_PACKAGES:-}"
	} | tr ', \t' '\n' | sed '/^$/d' | sort -u
)
[ "${#packages[@]}" -gt 0 ] || die "no packages listed in $context/packages.txt"
for p in "${packages[@]}"; do
	[[ $p =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "not a Debian package name: '$p'"
done

step "checking prerequisites"
need_root
need_docker
for c in tar sha256sum flock chroot mount umount findmnt dpkg; do
	command -v "$c" >/dev/null 2>&1 || die "$c not found: this script needs a Debian-family host"
done
arch=$(dpkg --print-architecture)
lock base

# The recipe: this script, suite, architecture and package list. Not the mirror (any
# mirror serves the same archive) and not lib.sh (helpers only). Debian updates do
# not change it: --force picks them up.
base_recipe=$({
	cat "$0"
	printf '%s\n' "base=$base" "suite=$suite" "arch=$arch" "${packages[@]}"
} | sha256_of)

work=""
rootfs=""
# unmount_all: unmount whatever is still mounted below the temporary root (debootstrap
# and the security-update step mount /proc), deepest first.
unmount_all() {
	[ -n "$rootfs" ] || return 0
	local m
	findmnt -rn -o TARGET | awk -v p="$rootfs/" 'index($0, p) == 1' | sort -r |
		while IFS= read -r m; do umount -l "$m" || true; done
	if mountpoint -q "$rootfs"; then umount -l "$rootfs" || true; fi
}
cleanup() {
	local rc=$?
	if [ -n "$work" ] && [ -d "$work" ]; then
		unmount_all
		# --one-file-system: never descend into anything still mounted.
		rm -rf --one-file-system "$work" ||
			printf 'warning: could not remove %s\n' "$work" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

build_base() {
	redact_apt_sources
	ensure_apt_lists
	ensure_cmd debootstrap debootstrap
	local mirror security apt_proxy
	mirror=${SANDBOXD_DEBIAN_MIRROR:-$(apt_repo_uri Debian)}
	[ -n "$mirror" ] ||
		die "no Debian archive in this machine's apt sources; set SANDBOXD_DEBIAN_MIRROR to a Debian mirror URL"
	security=${SANDBOXD_DEBIAN_SECURITY_MIRROR:-$(apt_repo_uri Debian-Security)}
	[ "$security" != none ] || security=""
	mirror=${mirror%/}
	security=${security%/}
	add_redaction "$mirror"
	[ -z "$security" ] || add_redaction "$security"
	[ -n "$security" ] || printf 'warning: no Debian security archive in apt sources: building without security updates\n' >&2

	# A host whose apt goes through a proxy: debootstrap (wget) and the chroot's apt
	# use the same one.
	apt_proxy=""
	eval "$(apt-config shell apt_proxy Acquire::http::Proxy 2>/dev/null || true)"
	if [ -n "$apt_proxy" ] && [ -z "${http_proxy:-}" ]; then
		export http_proxy=$apt_proxy
	fi

	work=$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-default-image.XXXXXX")
	chmod 0755 "$work"
	rootfs=$work/rootfs
	local log=$work/debootstrap.log
	mkdir "$rootfs"
	# The root filesystem is built in memory when there is room: dpkg syncs every
	# file it writes, which on a busy disk costs minutes; on tmpfs it costs nothing.
	local avail_mb
	avail_mb=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo 2>/dev/null || echo 0)
	if [ "${SANDBOXD_IMAGE_TMPFS:-auto}" != no ] && [ "${avail_mb:-0}" -ge 4096 ]; then
		mount -t tmpfs -o size=3g,mode=0755 sandboxd-rootfs "$rootfs"
	fi

	# Downloaded packages are kept for the next build (debootstrap checks them
	# against the archive's checksums), which then only fetches what changed.
	local cache=${SANDBOXD_IMAGE_CACHE:-/var/cache/sandboxd/debs}
	local -a cache_opt=()
	if [ "$cache" != none ]; then
		[[ $cache == /* ]] || die "SANDBOXD_IMAGE_CACHE must be an absolute path or none, not '$cache'"
		mkdir -p "$cache"
		cache_opt=(--cache-dir="$cache")
	fi

	step "debootstrap --variant=minbase $suite ($arch, ${#packages[@]} packages + required set) from the machine's apt mirror"
	local include
	include=$(
		IFS=,
		echo "${packages[*]}"
	)
	# Only phase lines are shown (not one line per package); the mirror is not echoed.
	if ! debootstrap --variant=minbase --arch="$arch" --components=main "${cache_opt[@]}" \
		--include="$include" "$suite" "$rootfs" "$mirror" </dev/null 2>&1 |
		tee "$log" |
		{ grep --line-buffered -E '^(I: (Retrieving (InRelease|Release|Packages)$|Valid Release|Resolving|Installing|Unpacking (required|the base)|Configuring (required|the base)|Base system)|[WE]:)' || true; } |
		redact |
		while IFS= read -r line; do step "  debootstrap: $line"; done; then
		printf '%s\n' '--- last lines of the debootstrap log ---' >&2
		tail -n 12 "$log" | redact >&2
		if [ -f "$rootfs/debootstrap/debootstrap.log" ]; then
			printf '%s\n' '--- last lines of debootstrap/debootstrap.log ---' >&2
			tail -n 12 "$rootfs/debootstrap/debootstrap.log" | redact >&2
		fi
		die "debootstrap failed (see above)"
	fi

	step "apt sources, security updates and cleanup inside the root filesystem"
	# The image's apt sources are the ones this machine uses, so a derived
	# Dockerfile (USER root; RUN apt-get install ...) works where this host's does.
	rm -f "$rootfs/etc/apt/sources.list"
	{
		printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
			"$mirror" "$suite" "$suite"
		[ -z "$security" ] ||
			printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
				"$security" "$suite"
	} >"$rootfs/etc/apt/sources.list.d/debian.sources"
	# Like Debian's slim images: no docs, man pages or translations, now or later
	# (copyright files are kept).
	cat >"$rootfs/etc/dpkg/dpkg.cfg.d/sandboxd-nodoc" <<'NODOC'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
NODOC
	# Nothing may start services while packages are configured in the chroot.
	printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
	chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
	mount -t proc proc "$rootfs/proc"
	# The upgrade's downloads go to (and come from) the same cache.
	[ "$cache" = none ] || mount --bind "$cache" "$rootfs/var/cache/apt/archives"
	local -a apt_opts=(-q -y -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
	[ -z "$apt_proxy" ] || apt_opts+=(-o "Acquire::http::Proxy=$apt_proxy")
	chroot "$rootfs" apt-get "${apt_opts[@]}" update </dev/null >>"$log" 2>&1 ||
		{ tail -n 20 "$log" | redact >&2; die "apt-get update inside the root filesystem failed"; }
	chroot "$rootfs" apt-get "${apt_opts[@]}" upgrade </dev/null >>"$log" 2>&1 ||
		{ tail -n 20 "$log" | redact >&2; die "apt-get upgrade inside the root filesystem failed"; }
	local upgraded
	upgraded=$(grep -c '^Unpacking ' "$log" || true)
	step "  $upgraded package(s) updated from $suite-updates/$suite-security"
	[ "$cache" = none ] || umount "$rootfs/var/cache/apt/archives"
	chroot "$rootfs" apt-get -q clean </dev/null >>"$log" 2>&1
	umount "$rootfs/proc"
	rm -f "$rootfs/usr/sbin/policy-rc.d"
	# Drop what debootstrap copied from the build host and all caches.
	(
		cd "$rootfs"
		find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
		find usr/share/doc -mindepth 1 -type d -empty -delete
		rm -rf usr/share/man/* usr/share/info/* usr/share/lintian/* usr/share/linda/*
		find usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
		rm -rf var/lib/apt/lists/* var/cache/apt/*.bin var/cache/apt/archives/*.deb \
			var/cache/debconf/*-old var/lib/dpkg/*-old var/log/apt/* var/cache/ldconfig/aux-cache \
			tmp/* var/tmp/* root/.cache debootstrap
		find var/log -type f -exec truncate -s 0 {} +
		: >etc/resolv.conf
		: >etc/hostname
		rm -f etc/machine-id var/lib/dbus/machine-id
		# /dev is Docker's at run time; debootstrap's device nodes are not needed.
		find dev -xdev -mindepth 1 -delete
	)

	step "docker import as $base"
	tar -C "$rootfs" --numeric-owner -c . |
		docker import \
			-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			-c 'CMD ["/bin/bash"]' \
			-c "LABEL $SANDBOXD_LABEL_RECIPE=$base_recipe $SANDBOXD_LABEL_KIND=base sandboxd.image.suite=$suite" \
			-m "sandboxd base image: debootstrap --variant=minbase $suite (recipe $base_recipe)" \
			- "$base" >/dev/null
	[ "$(image_label "$base" "$SANDBOXD_LABEL_RECIPE")" = "$base_recipe" ] ||
		die "imported $base but its recipe label does not match"
	sweep_dangling base # a replaced base goes once no image is built on it
	unmount_all
	rm -rf --one-file-system "$work"
	work=""
	step "  $base: $(image_size_mb "$base") MB"
}

if [ "$force" -eq 0 ] && [ "$(image_label "$base" "$SANDBOXD_LABEL_RECIPE")" = "$base_recipe" ]; then
	step "$base is up to date (recipe ${base_recipe:0:12}); nothing to do (--force rebuilds)"
else
	step "building $base (recipe ${base_recipe:0:12})"
	build_base
fi
step "$base ready"
