#!/usr/bin/env bash
# Build the MCP sidecar test images, without a registry: the MCP Go SDK's example
# servers (real third-party MCP servers), each built with
#   CGO_ENABLED=0 go install github.com/modelcontextprotocol/go-sdk/examples/server/NAME@VERSION
# (VERSION is the go-sdk version in go.mod) and copied into an image FROM the tiny
# test image (build-test-image.sh), as /usr/local/bin/NAME, run as uid 1000.
#   sandboxd-mcp-memory:latest       memory (knowledge graph; stdio, or -http ADDR)
#   sandboxd-mcp-everything:latest   everything (stdio, or -http ADDR)
#   sandboxd-mcp-sse:latest          sse (legacy HTTP+SSE; -host, -port)
#   sandboxd-mcp-testserver:latest   e2e/mcptestserver of this repository (stdio): a
#                                    go-sdk server whose tool list changes and that
#                                    counts cancellations (go build, no registry)
#   sandboxd-mcp-evil:latest         e2e/evilmcp of this repository (stdio, or -http
#                                    ADDR): a hostile MCP server, stdlib only, that
#                                    plays the sidecar attacks of issue 21 (-attack)
# An image whose recipe (this script, the version, the base image's id) is current
# is skipped.
#
# Usage: build-sidecar-images.sh [--force]
#   --force     rebuild even when the images are up to date
# Environment:
#   SANDBOXD_TEST_IMAGE   base image (default sandboxd-test:latest; built when missing)
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR

base=${SANDBOXD_TEST_IMAGE:-sandboxd-test:latest}
parse_args "$@"

step "checking prerequisites"
need_docker
command -v go >/dev/null 2>&1 || die "go not found in PATH"
servers=(memory everything sse testserver evil)
module=github.com/modelcontextprotocol/go-sdk
version=$(cd "$here/.." && go list -m -f '{{.Version}}' "$module")
[ -n "$version" ] || die "no $module in go.mod"
if [ -z "$(image_id "$base")" ]; then
	step "$base is missing: building it"
	"$here/build-test-image.sh"
fi
base_id=$(image_id "$base")
lock sidecars

work=$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-sidecar-images.XXXXXX")
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
chmod 0755 "$work"

for name in "${servers[@]}"; do
	image=sandboxd-mcp-$name:latest
	recipe=$({
		cat "$0"
		printf '%s\n' "image=$image" "server=$name" "version=$version" "base=$base_id"
		if [ "$name" = testserver ]; then cat "$here/../e2e/mcptestserver/main.go"; fi
		if [ "$name" = evil ]; then cat "$here/../e2e/evilmcp/main.go"; fi
	} | sha256_of)
	if [ "$force" -eq 0 ] && [ "$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")" = "$recipe" ]; then
		step "$image is up to date (recipe ${recipe:0:12}); nothing to do (--force rebuilds)"
		continue
	fi
	mkdir -p "$work/$name"
	source=$module/examples/server/$name@$version
	if [ "$name" = testserver ]; then
		source="sandboxd e2e/mcptestserver (go-sdk $version)"
		step "go build ./e2e/mcptestserver"
		(cd "$here/.." && CGO_ENABLED=0 go build -trimpath -o "$work/$name/$name" ./e2e/mcptestserver)
	elif [ "$name" = evil ]; then
		source="sandboxd e2e/evilmcp (hostile, stdlib only)"
		step "go build ./e2e/evilmcp"
		(cd "$here/.." && CGO_ENABLED=0 go build -trimpath -o "$work/$name/$name" ./e2e/evilmcp)
	else
		step "go install $source"
		CGO_ENABLED=0 GOBIN="$work/$name" GOFLAGS=-trimpath go install "$source"
	fi
	cat >"$work/$name/Dockerfile" <<DOCKERFILE
FROM $base_id
COPY --chown=0:0 $name /usr/local/bin/$name
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/$name"]
CMD []
LABEL $SANDBOXD_LABEL_RECIPE=$recipe $SANDBOXD_LABEL_KIND=sidecar sandboxd.image.mcp-server="$source"
DOCKERFILE
	step "docker build $image"
	if ! DOCKER_BUILDKIT=0 docker build -q -t "$image" "$work/$name" >"$work/build.log" 2>&1; then
		tail -n 20 "$work/build.log" >&2
		die "docker build $image failed"
	fi
	got=$(image_label "$image" "$SANDBOXD_LABEL_RECIPE")
	[ "$got" = "$recipe" ] || die "built $image but its recipe label is '$got', expected $recipe"
	step "done: $image, $(image_size_mb "$image") MB"
done
sweep_dangling sidecar
