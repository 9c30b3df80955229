#!/usr/bin/env bash
# repo-summary: summarise a repository as one JSON object on stdout: git
# status, the diff against HEAD, recent commits, languages by file count.
# Needs bash, coreutils, awk and git (without git, or outside a repository,
# only the languages are reported).
#
# Exit status: 0 the summary was printed, 2 a usage error.
set -u -o pipefail

readonly MAX_ENTRIES=50 # status entries and diff files listed

usage() {
	cat >&2 <<'EOF'
usage: repo_summary.sh [PATH] [--commits N] [--top N]

Prints a JSON summary of the repository at PATH (default: the current
directory): branch, HEAD, upstream and ahead/behind, `git status` counts and
entries, the diff against HEAD (files changed, insertions, deletions), the
last N commits (--commits, default 10) and the top N languages by file count
(--top, default 10; tracked and untracked files, .gitignore respected).
EOF
}

json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\r'/\\r}
	s=${s//$'\t'/\\t}
	if [[ $s == *[[:cntrl:]]* ]]; then
		s=$(printf '%s' "$s" | LC_ALL=C tr -d '\000-\037\177')
	fi
	printf '"%s"' "$s"
}

usage_error() {
	echo "repo_summary.sh: $1" >&2
	usage
	printf '{"error":%s}\n' "$(json_str "$1")"
	exit 2
}

path= commits=10 top=10
while (($#)); do
	case $1 in
	-h | --help) usage; exit 0 ;;
	--commits | --top)
		(($# >= 2)) || usage_error "$1 needs a value"
		[[ $1 == --commits ]] && commits=$2 || top=$2
		shift 2
		;;
	--commits=*) commits=${1#*=}; shift ;;
	--top=*) top=${1#*=}; shift ;;
	--)
		shift
		if (($# > 0)) && [[ -z $path ]]; then
			path=$1
			shift
		fi
		(($# == 0)) || usage_error "unexpected argument: $1"
		;;
	-*) usage_error "unknown option: $1" ;;
	*)
		[[ -z $path ]] || usage_error "unexpected argument: $1 (one PATH only)"
		path=$1
		shift
		;;
	esac
done
path=${path:-.}
[[ $commits =~ ^[0-9]+$ ]] && ((commits <= 1000)) || usage_error "--commits \"$commits\" is not a number from 0 to 1000"
[[ $top =~ ^[0-9]+$ ]] && ((top <= 1000)) || usage_error "--top \"$top\" is not a number from 0 to 1000"
[[ -d $path ]] || usage_error "$path is not a directory"
dir=$(cd -- "$path" && pwd -P) || usage_error "cannot enter $path"
cd -- "$dir" || exit 2

# Text from git is made safe for awk: no control characters but tab,
# newline and the field separator \037.
sanitize() { LC_ALL=C tr -d '\000-\010\013-\036\177'; }

readonly AWK_LIB='
function repl(s, from, to,    out, i) {
	out = ""
	while ((i = index(s, from)) > 0) { out = out substr(s, 1, i - 1) to; s = substr(s, i + length(from)) }
	return out s
}
function jstr(s) {
	s = repl(s, "\\", "\\\\"); s = repl(s, "\"", "\\\""); s = repl(s, "\t", "\\t")
	return "\"" s "\""
}
'

git_ok=false
if command -v git >/dev/null 2>&1 && root=$(git rev-parse --show-toplevel 2>/dev/null); then
	git_ok=true
fi

out="{\"dir\":$(json_str "$dir"),\"git\":$git_ok"

if $git_ok; then
	out+=",\"root\":$(json_str "$root")"
	cd -- "$root" || exit 1 # paths relative to the repository's top

	# Branch, HEAD, upstream and counts from porcelain v2.
	out+=","$(git status --porcelain=v2 --branch 2>/dev/null | sanitize | awk "$AWK_LIB"'
/^# branch\.oid / { oid = $3 }
/^# branch\.head / { head = substr($0, 15) }
/^# branch\.upstream / { up = substr($0, 19) }
/^# branch\.ab / { ahead = substr($3, 2) + 0; behind = substr($4, 2) + 0; ab = 1 }
/^1 / || /^2 / { x = substr($2, 1, 1); y = substr($2, 2, 1); if (x != ".") staged++; if (y != ".") unstaged++ }
/^u / { conflicted++ }
/^\? / { untracked++ }
END {
	b = (head == "(detached)" || head == "") ? "null" : jstr(head)
	h = (oid == "(initial)" || oid == "") ? "null" : jstr(substr(oid, 1, 12))
	u = (up == "") ? "null" : jstr(up)
	printf "\"branch\":%s,\"head\":%s,\"upstream\":%s", b, h, u
	if (ab) printf ",\"ahead\":%d,\"behind\":%d", ahead, behind
	printf ",\"status\":{\"staged\":%d,\"unstaged\":%d,\"untracked\":%d,\"conflicted\":%d", staged, unstaged, untracked, conflicted
}')

	# The entries as git status --short shows them.
	out+=","$(git status --short 2>/dev/null | sanitize | awk -v max="$MAX_ENTRIES" "$AWK_LIB"'
{ n++; if (n <= max) list = list (n > 1 ? "," : "") jstr($0) }
END { printf "\"entries\":[%s],\"entries_omitted\":%d}", list, (n > max ? n - max : 0) }')

	# The diff of the work tree and the index against HEAD (against the
	# empty tree before the first commit).
	if git rev-parse --verify -q HEAD >/dev/null; then
		diff=(git diff HEAD --numstat)
	else
		diff=(git diff --cached --numstat)
	fi
	out+=","$("${diff[@]}" 2>/dev/null | sanitize | awk -F'\t' -v max="$MAX_ENTRIES" "$AWK_LIB"'
{
	n++; bin = $1 == "-"; ins = bin ? 0 : $1 + 0; del = bin ? 0 : $2 + 0; tins += ins; tdel += del
	p = $3; for (i = 4; i <= NF; i++) p = p "\t" $i
	if (n <= max) list = list (n > 1 ? "," : "") "{\"path\":" jstr(p) ",\"insertions\":" (bin ? "null" : ins) ",\"deletions\":" (bin ? "null" : del) (bin ? ",\"binary\":true" : "") "}"
}
END { printf "\"diff_stat\":{\"files_changed\":%d,\"insertions\":%d,\"deletions\":%d,\"files\":[%s],\"files_omitted\":%d}", n, tins, tdel, list, (n > max ? n - max : 0) }')

	# Recent commits.
	log=""
	if ((commits > 0)) && git rev-parse --verify -q HEAD >/dev/null; then
		log=$(git log -n "$commits" --date=short --format='%h%x1f%an%x1f%ad%x1f%s' 2>/dev/null | sanitize | awk -F'\037' "$AWK_LIB"'
{ list = list (NR > 1 ? "," : "") "{\"hash\":" jstr($1) ",\"author\":" jstr($2) ",\"date\":" jstr($3) ",\"subject\":" jstr($4) "}" }
END { printf "%s", list }')
	fi
	out+=",\"log\":[$log]"
fi

# Languages by file count: tracked and untracked files in a repository
# (.gitignore respected), else every file outside hidden folders and
# node_modules.
if $git_ok; then
	list_files() { git -c core.quotepath=off ls-files -z -co --exclude-standard 2>/dev/null | tr '\0' '\n'; }
else
	list_files() { find . \( -name '.*' -a ! -name . -o -name node_modules \) -prune -o -type f -print 2>/dev/null; }
fi
out+=","$(list_files | sanitize | awk -v top="$top" "$AWK_LIB"'
BEGIN {
	n = split("go=Go py=Python pyi=Python js=JavaScript mjs=JavaScript cjs=JavaScript jsx=JavaScript ts=TypeScript tsx=TypeScript mts=TypeScript " \
		"c=C h=C cc=C++ cpp=C++ cxx=C++ hpp=C++ hh=C++ hxx=C++ rs=Rust java=Java kt=Kotlin kts=Kotlin scala=Scala rb=Ruby php=PHP " \
		"cs=C# fs=F# swift=Swift m=Objective-C mm=Objective-C++ dart=Dart lua=Lua pl=Perl pm=Perl r=R jl=Julia ex=Elixir exs=Elixir " \
		"erl=Erlang hs=Haskell ml=OCaml mli=OCaml clj=Clojure cljs=Clojure zig=Zig nim=Nim v=V groovy=Groovy vue=Vue svelte=Svelte " \
		"sh=Shell bash=Shell zsh=Shell fish=Shell ps1=PowerShell bat=Batchfile sql=SQL html=HTML htm=HTML css=CSS scss=SCSS sass=Sass " \
		"less=Less md=Markdown mdx=Markdown rst=reStructuredText txt=Text json=JSON yaml=YAML yml=YAML toml=TOML xml=XML ini=INI " \
		"proto=Protocol_Buffers graphql=GraphQL tf=HCL hcl=HCL nix=Nix cmake=CMake mk=Makefile asm=Assembly s=Assembly " \
		"ipynb=Jupyter_Notebook tex=TeX csv=CSV svg=SVG png=Image jpg=Image jpeg=Image gif=Image", pairs, " ")
	for (i = 1; i <= n; i++) { split(pairs[i], kv, "="); lang[kv[1]] = repl(kv[2], "_", " ") }
	split("Makefile=Makefile GNUmakefile=Makefile makefile=Makefile Dockerfile=Dockerfile Containerfile=Dockerfile " \
		"CMakeLists.txt=CMake Gemfile=Ruby Rakefile=Ruby Jenkinsfile=Groovy BUILD=Starlark WORKSPACE=Starlark go.mod=Go go.sum=Go", pairs, " ")
	for (i in pairs) { split(pairs[i], kv, "="); byname[kv[1]] = kv[2] }
}
{
	files++
	base = $0; sub(/.*\//, "", base)
	if (base in byname) { count[byname[base]]++; next }
	if (match(base, /\.[^.]+$/) && RSTART > 1) {
		ext = tolower(substr(base, RSTART + 1))
		count[ext in lang ? lang[ext] : "." ext]++
	}
}
END {
	# Top N by count, then by name, with a selection (N is small).
	for (k in count) { nl++; names[nl] = k }
	out = ""
	for (i = 1; i <= nl && i <= top; i++) {
		best = i
		for (j = i + 1; j <= nl; j++)
			if (count[names[j]] > count[names[best]] || count[names[j]] == count[names[best]] && names[j] < names[best]) best = j
		t = names[i]; names[i] = names[best]; names[best] = t
		out = out (i > 1 ? "," : "") "{\"language\":" jstr(names[i]) ",\"files\":" count[names[i]] "}"
	}
	printf "\"files\":%d,\"languages\":[%s],\"languages_omitted\":%d", files, out, (nl > top ? nl - top : 0)
}')

printf '%s}\n' "$out"
