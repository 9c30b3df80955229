#!/usr/bin/env bash
# Build the default session image, sandboxd-default:latest, with no image registry:
#   1. build-base-image.sh: debootstrap a Debian bookworm root filesystem from the
#      machine's own apt mirror with images/default/packages.txt, docker import it as
#      sandboxd-base:bookworm (skipped when up to date);
#   2. docker build --network none images/default/Dockerfile FROM that base
#      (user agent 1000:1000, /workspace, env, labels);
#   3. a smoke test (git, python, pip, rg, curl, a C compiler, vi as uid 1000, no network).
# Each image is skipped when it exists with the same recipe hash (label
# sandboxd.image.recipe), so a second run takes well under a second.
#
# Usage: build-default-image.sh [--force]
#   --force     rebuild the base and the default image even when up to date
# Environment:
#   SANDBOXD_DEFAULT_IMAGE          image name (sandboxd-default:latest)
#   SANDBOXD_BASE_IMAGE, SANDBOXD_DEBIAN_SUITE, SANDBOXD_IMAGE_EXTRA_PACKAGES,
#   SANDBOXD_DEBIAN_MIRROR, SANDBOXD_DEBIAN_SECURITY_MIRROR: see build-base-image.sh
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR

image=${SANDBOXD_DEFAULT_IMAGE:-sandboxd-default:latest}
base=${SANDBOXD_BASE_IMAGE:-sandboxd-base:bookworm}
export SANDBOXD_BASE_IMAGE=$base
context=$here/default
parse_args "$@"

step "checking prerequisites"
need_root
need_docker
[ -f "$context/Dockerfile" ] || die "missing $context/Dockerfile"
lock default

step "base image $base"
if [ "$force" -eq 1 ]; then
	"$here/build-base-image.sh" --force
else
	"$here/build-base-image.sh"
fi

# The recipe: this script, the Dockerfile and the exact base image ID, so a rebuilt
# base always rebuilds the default image. (Not lib.sh: helpers only.)
base_id=$(image_id "$base")
[ -n "$base_id" ] || die "$base is missing after the base stage"
recipe=$({
	cat "$0" "$context/Dockerfile"
	printf '%s\n' "image=$image" "base=$base_id"
} | sha256_of)

if [ "$force" -eq 0 ] && [ "$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")" = "$recipe" ]; then
	step "$image is up to date (recipe ${recipe:0:12}); nothing to do (--force rebuilds)"
	exit 0
fi

step "docker build --network none $image FROM $base (recipe ${recipe:0:12})"
# The Dockerfile is the only file of the context that the build needs.
docker build --network none \
	--build-arg "BASE_IMAGE=$base" \
	--build-arg "RECIPE=$recipe" \
	-t "$image" \
	-f "$context/Dockerfile" "$context" </dev/null 2>&1 |
	{ grep --line-buffered -vE '^(DEPRECATED: The legacy builder| {12}|$)' || true; } |
	while IFS= read -r line; do step "  build: $line"; done
[ "$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")" = "$recipe" ] ||
	die "docker build finished but $image does not carry recipe $recipe"
sweep_dangling default
sweep_dangling base # a replaced base can only go once no image is built on it

step "smoke test: git, python, pip, rg, curl, cc, vi as uid 1000 with no network"
docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges \
	--read-only --tmpfs /tmp:exec --user 1000:1000 "$image" \
	bash -c 'git --version && python --version && pip --version && rg --version | head -n 1 &&
		curl --version | head -n 1 && printf "int main(void){return 0;}\n" >/tmp/t.c && cc -o /tmp/t /tmp/t.c && /tmp/t &&
		echo "cc: ok" && command -v vi jq unzip file patch less make' </dev/null |
	while IFS= read -r line; do step "  $line"; done

step "done: $image, $(image_size_mb "$image") MB, recipe ${recipe:0:12}"
