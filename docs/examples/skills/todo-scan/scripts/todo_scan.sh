#!/usr/bin/env bash
# todo-scan: comment tags under a folder, as JSON on stdout.
set -u -o pipefail
path=. tag='TODO|FIXME|XXX' max=100 icase=
while (($#)); do
	case $1 in
	--tag) tag=${2:?--tag needs a value}; shift 2 ;;
	--max) max=${2:?--max needs a value}; shift 2 ;;
	--ignore-case) icase=-i; shift ;;
	-*) echo "todo_scan.sh: unknown option $1" >&2; exit 2 ;;
	*) path=$1; shift ;;
	esac
done
[[ $max =~ ^[0-9]+$ ]] || { echo "todo_scan.sh: --max wants a number" >&2; exit 2; }
[[ $tag =~ ^(TODO|FIXME|XXX|TODO\|FIXME\|XXX)$ ]] || { echo "todo_scan.sh: --tag wants TODO, FIXME or XXX" >&2; exit 2; }
if command -v rg >/dev/null 2>&1; then
	scan() { rg -n --no-heading $icase -e "\\b($tag)\\b" -- "$path"; }
else
	scan() { grep -rnE $icase --exclude-dir=.git --exclude-dir=node_modules -e "\\b($tag)\\b" -- "$path"; }
fi
# file:line:text lines become JSON with awk (no jq needed).
scan 2>/dev/null | LC_ALL=C tr -d '\000-\010\013-\037\177' | awk -v max="$max" -v tag="$tag" -v icase="$icase" '
# jstr quotes s for JSON (char by char: gsub handles backslashes
# differently in mawk and gawk).
function jstr(s,    out, i, c) {
	out = ""
	for (i = 1; i <= length(s); i++) {
		c = substr(s, i, 1)
		out = out (c == "\\" ? "\\\\" : c == "\"" ? "\\\"" : c == "\t" ? "\\t" : c)
	}
	return "\"" out "\""
}
{
	i = index($0, ":"); file = substr($0, 1, i - 1); rest = substr($0, i + 1)
	j = index(rest, ":"); line = substr(rest, 1, j - 1); text = substr(rest, j + 1)
	t = icase != "" ? toupper(text) : text
	match(t, "(" tag ")"); found = substr(t, RSTART, RLENGTH)
	sub(/^[ \t]+/, "", text)
	n++
	if (n <= max) items = items (n > 1 ? "," : "") "{\"file\":" jstr(file) ",\"line\":" line + 0 ",\"tag\":" jstr(found) ",\"text\":" jstr(text) "}"
}
END { printf "{\"count\":%d,\"items\":[%s],\"truncated\":%s}\n", n, items, (n > max ? "true" : "false") }'
