#!/usr/bin/env bash
# Optional speed-up: ripgrep into ~/.local/bin (on PATH in the sandbox).
# Needs a session network that reaches github.com; without it the skill
# still works with grep, so a failed download is not an error.
set -u
command -v rg >/dev/null 2>&1 && exit 0
mkdir -p "$HOME/.local/bin"
url=https://github.com/BurntSushi/ripgrep/releases/download/14.1.1/ripgrep-14.1.1-x86_64-unknown-linux-musl.tar.gz
if curl -fsSL --max-time 60 "$url" | tar -xz -C "$HOME/.local/bin" --strip-components=1 --wildcards '*/rg'; then
	echo "installed rg into $HOME/.local/bin"
else
	echo "no network for ripgrep: todo-scan uses grep" >&2
fi
exit 0
