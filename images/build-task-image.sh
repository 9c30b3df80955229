#!/usr/bin/env bash
# Build sandboxd-task:latest, a benchmark task image built the way SWE-bench builds its
# images (task/Dockerfile): a git repository at /testbed owned by root with a bug, a
# Python virtual environment at /opt/venv owned by root with a small package installed,
# WORKDIR /testbed, USER root, and /usr/local/bin/run_tests.sh, which exits 0 only once
# the bug is fixed. FROM the default image (built first when missing or out of date, see
# build-default-image.sh), with no network and no registry. Skipped when current.
#
# Usage: build-task-image.sh [--force]
#   --force     rebuild even when an image with the same recipe hash exists
# Environment:
#   SANDBOXD_TASK_IMAGE      image name (sandboxd-task:latest)
#   SANDBOXD_TASK_FILES      files in /testbed's working tree (10000)
#   SANDBOXD_DEFAULT_IMAGE   the base (sandboxd-default:latest)
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR

image=${SANDBOXD_TASK_IMAGE:-sandboxd-task:latest}
base=${SANDBOXD_DEFAULT_IMAGE:-sandboxd-default:latest}
files=${SANDBOXD_TASK_FILES:-10000}
context=$here/task
parse_args "$@"
[[ $files =~ ^[0-9]+$ ]] && [ "$files" -ge 10 ] || die "SANDBOXD_TASK_FILES=$files: want a number of files, at least 10"

step "checking prerequisites"
need_docker
[ -f "$context/Dockerfile" ] || die "missing $context/Dockerfile"
lock task

base_id=$(image_id "$base")
if [ -z "$base_id" ] || [ "$force" -eq 1 ]; then
	step "base image $base"
	base_args=()
	if [ "$force" -eq 1 ]; then base_args+=(--force); fi
	SANDBOXD_DEFAULT_IMAGE=$base "$here/build-default-image.sh" "${base_args[@]}"
	base_id=$(image_id "$base")
fi
[ -n "$base_id" ] || die "$base is missing after building it"

# The recipe: this script, every file of the context and the exact base image ID, so a
# rebuilt default image rebuilds the task image. (Not lib.sh: helpers only.)
recipe=$({
	cat "$0"
	(cd "$context" && find . -type f | LC_ALL=C sort | while IFS= read -r f; do
		printf '%s\n' "$f"
		cat "$f"
	done)
	printf '%s\n' "image=$image" "base=$base_id" "files=$files"
} | sha256_of)

if [ "$force" -eq 0 ] && [ "$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")" = "$recipe" ]; then
	step "$image is up to date (recipe ${recipe:0:12}); nothing to do (--force rebuilds)"
	exit 0
fi

step "docker build --network none $image FROM $base, $files files in /testbed (recipe ${recipe:0:12})"
docker build --network none \
	--build-arg "BASE_IMAGE=$base" \
	--build-arg "FILES=$files" \
	--build-arg "RECIPE=$recipe" \
	-t "$image" "$context" </dev/null 2>&1 |
	{ grep --line-buffered -vE '^(DEPRECATED: The legacy builder| {12}|$)' || true; } |
	while IFS= read -r line; do step "  build: $line"; done
[ "$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")" = "$recipe" ] ||
	die "docker build finished but $image does not carry recipe $recipe"
sweep_dangling task

step "smoke test: the tests fail as the task is found (the bug), as root with no network"
if docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges "$image" \
	sh -c 'git -C /testbed status --porcelain | head -1; test "$(git -C /testbed ls-files | wc -l)" -eq '"$files"' || exit 3; run_tests.sh' </dev/null >/dev/null 2>&1; then
	die "run_tests.sh passed in the image as built: the task has no bug to fix"
elif [ "$?" -eq 3 ]; then
	die "/testbed does not hold $files files"
fi

step "done: $image, $(image_size_mb "$image") MB, recipe ${recipe:0:12}"
