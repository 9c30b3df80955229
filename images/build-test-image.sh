#!/usr/bin/env bash
# Build sandboxd-test:latest, a tiny image (~5 MB) for tests: busybox + static bash,
# a uid/gid 1000 user "agent", /workspace owned by it. No registry, no docker build:
# Debian's busybox-static and bash-static packages are unpacked into a folder and
# imported with `docker import`. Takes a few seconds.
#
# Usage: build-test-image.sh [--force]
#   --force     rebuild even when an image with the same recipe hash exists
# Environment:
#   SANDBOXD_TEST_IMAGE   image name (default sandboxd-test:latest)
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR

image=${SANDBOXD_TEST_IMAGE:-sandboxd-test:latest}
parse_args "$@"

packages=(busybox-static bash-static)

step "checking prerequisites"
need_root
need_docker
for c in apt-get apt-cache dpkg-deb tar sha256sum flock; do
	command -v "$c" >/dev/null 2>&1 || die "$c not found: this script needs a Debian-family host"
done
ensure_apt_lists
lock test

# The recipe: this script and the exact package versions (not lib.sh: helpers only).
# Any change rebuilds.
mapfile -t versions < <(candidate_versions "${packages[@]}")
[ "${#versions[@]}" -eq "${#packages[@]}" ] ||
	die "not all of ${packages[*]} are available from the machine's apt sources (found: ${versions[*]:-none})"
recipe=$({
	cat "$0"
	printf '%s\n' "image=$image" "${versions[@]}"
} | sha256_of)

have=$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")
if [ "$force" -eq 0 ] && [ "$have" = "$recipe" ]; then
	step "$image is up to date (recipe ${recipe:0:12}); nothing to do (--force rebuilds)"
	exit 0
fi
redact_apt_sources
step "building $image (recipe ${recipe:0:12}; ${versions[*]})"

work=$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-test-image.XXXXXX")
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
chmod 0755 "$work"
mkdir "$work/debs" "$work/root"
root=$work/root

step "apt-get download ${versions[*]}"
if ! (cd "$work/debs" && apt-get download -q -o APT::Sandbox::User=root "${versions[@]}" </dev/null >"$work/apt.log" 2>&1); then
	tail -n 20 "$work/apt.log" | redact >&2
	die "apt-get download failed"
fi

step "unpacking into a temporary root"
for deb in "$work"/debs/*.deb; do
	dpkg-deb -x "$deb" "$root"
done
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/share/debianutils"

step "creating the userland (busybox applets, bash, users, folders)"
install -d -m 0755 "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin" "$root/usr/local/bin" \
	"$root/etc" "$root/dev" "$root/proc" "$root/sys" "$root/run" "$root/var"
mv "$root/bin/bash-static" "$root/bin/bash"
n=0
while IFS= read -r applet; do
	case $applet in
	busybox | bash | '') continue ;;
	esac
	[ -e "$root/bin/$applet" ] || { ln -s busybox "$root/bin/$applet" && n=$((n + 1)); }
done < <("$root/bin/busybox" --list)
ln -sfn busybox "$root/bin/sh"
ln -sfn /bin/env "$root/usr/bin/env" # for "#!/usr/bin/env bash" scripts
[ "$(readlink "$root/bin/sh")" = busybox ] || die "/bin/sh is not busybox"
if [ -L "$root/bin/bash" ] || [ ! -x "$root/bin/bash" ]; then die "/bin/bash is not bash-static"; fi

cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
agent:x:1000:1000:sandboxd agent:/home/agent:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
agent:x:1000:
nogroup:x:65534:
GROUP
printf 'root:*:19000:0:99999:7:::\nagent:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n' >"$root/etc/shadow"
chmod 0644 "$root/etc/passwd" "$root/etc/group"
chmod 0640 "$root/etc/shadow"
printf '/bin/sh\n/bin/bash\n' >"$root/etc/shells"
install -d -m 0700 "$root/root"
install -d -m 1777 "$root/tmp" "$root/var/tmp"
install -d -m 0755 "$root/home"
install -d -m 0755 -o 1000 -g 1000 "$root/workspace" "$root/home/agent"

step "docker import as $image"
tar -C "$root" --numeric-owner -c . |
	docker import \
		-c 'USER 1000:1000' \
		-c 'WORKDIR /workspace' \
		-c 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/agent' \
		-c 'CMD ["/bin/bash"]' \
		-c "LABEL $SANDBOXD_LABEL_RECIPE=$recipe $SANDBOXD_LABEL_KIND=test sandboxd.image.packages=\"${versions[*]}\"" \
		-m "sandboxd test image (recipe $recipe)" \
		- "$image" >/dev/null

got=$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")
[ "$got" = "$recipe" ] || die "imported $image but its recipe label is '$got', expected $recipe"
sweep_dangling test
step "done: $image, $(image_size_mb "$image") MB, $n busybox applets, recipe ${recipe:0:12}"
