#!/usr/bin/env bash
# run-tests: run a project's tests and print one JSON object on stdout
# (progress and diagnostics on stderr). Needs bash, coreutils, grep, sed,
# awk; the runner itself (go, cargo, npm, pytest, make) must be installed.
#
# Exit status: 0 the tests ran (passed or failed: see "status"), 2 a usage
# error, 3 no runner found or the runner is not installed.
set -u -o pipefail

readonly MAX_MESSAGE=2000 # bytes of one failure's message
readonly TAIL_LINES=40    # lines of output_tail
readonly TAIL_BYTES=4000  # bytes of output_tail

usage() {
	cat >&2 <<'EOF'
usage: run_tests.sh [PATH] [--runner go|cargo|npm|pytest|make] [--filter PATTERN] [--max-failures N]

Runs the tests of the project at PATH (default: the current directory) and
prints a JSON summary: runner, command, exit code, passed/failed/skipped
counts where the runner's output says them, and the first failures with
their messages. Without --runner the first of go (go.mod), cargo
(Cargo.toml), npm (package.json with a "test" script), pytest (pytest.ini,
pyproject.toml [tool.pytest], setup.cfg [tool:pytest], tox.ini [pytest],
conftest.py, test_*.py) and make (a Makefile with a test target) found in
PATH is used; go.mod and Cargo.toml may also be in a folder above PATH. --filter selects tests: go test -run, cargo test FILTER,
pytest -k, npm test -- FILTER (make ignores it).
EOF
}

# json_str prints its argument as a JSON string.
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

runner= filter= max_failures=10 path= dir= cmd_text=
detected=()

# report prints the JSON object; $1 is the status, $2 an error message or
# "", $3 the JSON fields of the parsed results (or "").
report() {
	local status=$1 error=$2 results=$3 d out=
	local -a items=()
	for d in "${detected[@]}"; do items+=("$(json_str "$d")"); done
	out="{\"status\":$(json_str "$status")"
	[[ -n $runner ]] && out+=",\"runner\":$(json_str "$runner")"
	out+=",\"detected\":[$(IFS=,; printf '%s' "${items[*]}")]"
	[[ -n $dir ]] && out+=",\"dir\":$(json_str "$dir")"
	[[ -n $cmd_text ]] && out+=",\"command\":$(json_str "$cmd_text")"
	[[ -n $error ]] && out+=",\"error\":$(json_str "$error")"
	[[ -n $results ]] && out+=",$results"
	printf '%s}\n' "$out"
}

usage_error() {
	echo "run_tests.sh: $1" >&2
	usage
	report error "$1" ""
	exit 2
}

while (($#)); do
	case $1 in
	-h | --help) usage; exit 0 ;;
	--runner | --filter | --max-failures)
		(($# >= 2)) || usage_error "$1 needs a value"
		case $1 in
		--runner) runner=$2 ;;
		--filter) filter=$2 ;;
		--max-failures) max_failures=$2 ;;
		esac
		shift 2
		;;
	--runner=*) runner=${1#*=}; shift ;;
	--filter=*) filter=${1#*=}; shift ;;
	--max-failures=*) max_failures=${1#*=}; shift ;;
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
case $runner in
"" | go | cargo | npm | pytest | make) ;;
*) usage_error "unknown runner \"$runner\": want go, cargo, npm, pytest or make" ;;
esac
[[ $max_failures =~ ^[0-9]+$ ]] && ((max_failures <= 1000)) || usage_error "--max-failures \"$max_failures\" is not a number from 0 to 1000"
[[ -d $path ]] || usage_error "$path is not a directory"
dir=$(cd -- "$path" && pwd -P) || usage_error "cannot enter $path"
cd -- "$dir" || exit 2

# --- detection ---------------------------------------------------------

has_npm_test() {
	[[ -f package.json ]] || return 1
	if command -v jq >/dev/null 2>&1; then
		jq -e '(.scripts.test // "") as $t | ($t != "") and ($t | test("no test specified") | not)' package.json >/dev/null 2>&1
		return
	fi
	grep -Eq '"test"[[:space:]]*:' package.json && ! grep -q 'no test specified' package.json
}

has_pytest() {
	[[ -f pytest.ini || -f conftest.py ]] && return 0
	[[ -f pyproject.toml ]] && grep -q '^\[tool\.pytest' pyproject.toml && return 0
	[[ -f setup.cfg ]] && grep -q '^\[tool:pytest\]' setup.cfg && return 0
	[[ -f tox.ini ]] && grep -q '^\[pytest\]' tox.ini && return 0
	[[ -n $(find . -maxdepth 3 \( -name .git -o -name node_modules -o -name .venv -o -name venv \) -prune -o \
		-type f \( -name 'test_*.py' -o -name '*_test.py' \) -print -quit 2>/dev/null) ]]
}

has_make_test() {
	local f
	for f in GNUmakefile makefile Makefile; do
		[[ -f $f ]] && grep -Eq '^test[[:space:]]*::?([^=]|$)' "$f" && return 0
	done
	return 1
}

# find_up reports whether the file is in the folder or one above it, as go
# and cargo look for their module.
find_up() {
	local d=$dir
	while :; do
		[[ -f $d/$1 ]] && return 0
		[[ $d == / || -z $d ]] && return 1
		d=${d%/*}
		[[ -z $d ]] && d=/
	done
}

find_up go.mod && detected+=(go)
find_up Cargo.toml && detected+=(cargo)
has_npm_test && detected+=(npm)
has_pytest && detected+=(pytest)
has_make_test && detected+=(make)

if [[ -z $runner ]]; then
	if ((${#detected[@]} == 0)); then
		echo "run_tests.sh: no test runner found in $dir" >&2
		report no_runner "no go.mod, Cargo.toml, package.json with a test script, pytest configuration or test_*.py, or Makefile with a test target in $dir" ""
		exit 3
	fi
	runner=${detected[0]}
fi

# --- the command -------------------------------------------------------

cmd=()
case $runner in
go) cmd=(go test -json) && [[ -n $filter ]] && cmd+=(-run "$filter"); cmd+=(./...) ;;
cargo) cmd=(cargo test --no-fail-fast) && [[ -n $filter ]] && cmd+=("$filter") ;;
npm) cmd=(npm test --silent) && [[ -n $filter ]] && cmd+=(-- "$filter") ;;
pytest)
	if command -v pytest >/dev/null 2>&1; then
		cmd=(pytest)
	else
		cmd=(python3 -m pytest)
	fi
	cmd+=(-q -rfE --tb=short -p no:cacheprovider)
	[[ -n $filter ]] && cmd+=(-k "$filter")
	;;
make) cmd=(make test) ;;
esac
cmd_text=$(printf '%q ' "${cmd[@]}")
cmd_text=${cmd_text% }

tool=${cmd[0]}
if ! command -v "$tool" >/dev/null 2>&1 || { [[ $runner == pytest && $tool == python3 ]] && ! python3 -c 'import pytest' >/dev/null 2>&1; }; then
	what=$tool
	[[ $runner == pytest ]] && what=pytest
	echo "run_tests.sh: $what is not installed" >&2
	report error "$what is not installed (not on PATH): install it, or choose another runner with --runner" ""
	exit 3
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/run-tests.XXXXXX") || exit 1
trap 'rm -rf -- "$work"' EXIT

echo "run_tests.sh: $cmd_text (in $dir)" >&2
if [[ $runner == go ]]; then
	"${cmd[@]}" </dev/null >"$work/out" 2>"$work/err"
	code=$?
	cat "$work/err" >>"$work/raw"
else
	CI=true "${cmd[@]}" </dev/null >"$work/out" 2>&1
	code=$?
	cp "$work/out" "$work/raw"
fi
echo "run_tests.sh: exit status $code" >&2

# clean makes raw output safe to parse: no ANSI escapes, no control
# characters but tab and newline, valid UTF-8 where iconv can say.
clean() {
	sed 's/\x1b\[[0-9;?]*[A-Za-z]//g; s/\r$//' | LC_ALL=C tr -d '\000-\010\013-\037\177' |
		if command -v iconv >/dev/null 2>&1; then iconv -f UTF-8 -t UTF-8 -c; else cat; fi
}

# --- parsers: each prints the JSON fields passed, failed, skipped, failures,
# failures_omitted -------------------------------------------------------

# Functions shared by the awk parsers; messages come out escaped for JSON.
readonly AWK_LIB='
function repl(s, from, to,    out, i) {
	out = ""
	while ((i = index(s, from)) > 0) { out = out substr(s, 1, i - 1) to; s = substr(s, i + length(from)) }
	return out s
}
function jesc(s) {
	s = repl(s, "\\", "\\\\"); s = repl(s, "\"", "\\\""); s = repl(s, "\t", "\\t"); s = repl(s, "\n", "\\n")
	return s
}
# cut shortens raw text to n bytes.
function cut(s, n) { return length(s) <= n ? s : substr(s, 1, n) "..." }
function num(v) { return v == "" ? "null" : v + 0 }
function emit(passed, failed, skipped,    i, out) {
	out = "\"passed\":" num(passed) ",\"failed\":" num(failed) ",\"skipped\":" num(skipped) ",\"failures\":["
	for (i = 1; i <= nf && i <= maxf; i++) {
		out = out (i > 1 ? "," : "") "{\"name\":\"" jesc(fname[i]) "\",\"message\":\"" jesc(cut(fmsg[i], maxmsg)) "\"}"
	}
	out = out "],\"failures_omitted\":" (nf > maxf ? nf - maxf : 0)
	print out
}
function addfail(name, msg) { sub(/^\n+/, "", msg); nf++; fname[nf] = name; fmsg[nf] = msg }
'

# go test -json: the Output strings are JSON already; they are decoded
# (just enough: \n, \t, \", \\, \uXXXX kept) into raw text first.
parse_go() {
	awk -v maxf="$max_failures" -v maxmsg="$MAX_MESSAGE" "$AWK_LIB"'
function field(line, key,    re, s) {
	re = "\"" key "\":\"([^\"\\\\]|\\\\.)*\""
	if (!match(line, re)) return ""
	s = substr(line, RSTART + length(key) + 4, RLENGTH - length(key) - 5)
	return s
}
function hex(s,    v, i) {
	v = 0
	for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", tolower(substr(s, i, 1))) - 1
	return v
}
# unesc decodes a JSON string body: \uXXXX below 0x80 (encoding/json writes
# <, > and & so) to its character, others to "?".
function unesc(s,    out, i, c, n, v) {
	out = ""
	while ((i = index(s, "\\")) > 0) {
		out = out substr(s, 1, i - 1); c = substr(s, i + 1, 1); n = 2
		if (c == "n") out = out "\n"; else if (c == "t") out = out "\t"; else if (c == "r") out = out ""
		else if (c == "u") { v = hex(substr(s, i + 2, 4)); out = out (v >= 32 && v < 127 ? sprintf("%c", v) : "?"); n = 6 }
		else out = out c
		s = substr(s, i + n)
	}
	return out s
}
function keep(text) {
	return text !~ /^[ \t]*(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|FAIL|SKIP):)/ && text !~ /^(PASS|FAIL|ok  )[ \t\n]/ && text != "PASS\n" && text != "FAIL\n"
}
/^\{/ {
	action = field($0, "Action"); pkg = field($0, "Package"); test = field($0, "Test")
	if (action == "build-output") {
		ip = field($0, "ImportPath"); sub(/ \[.*$/, "", ip)
		if (length(build[ip]) < 20000) build[ip] = build[ip] unesc(field($0, "Output"))
		next
	}
	if (action == "output") {
		text = unesc(field($0, "Output"))
		k = pkg SUBSEP test
		if (test != "") {
			if (keep(text) && lines[k] < 100) { sub(/^[ \t]+/, "", text); out[k] = out[k] text; lines[k]++ }
		} else if (lines[k] < 100 && text !~ /^(ok  |PASS|FAIL|\?   )/ && text != "PASS\n" && text != "FAIL\n") {
			out[k] = out[k] text; lines[k]++
		}
		next
	}
	if (action == "pass" || action == "fail" || action == "skip") {
		if (test == "") { if (action == "fail") { npf++; pf[npf] = pkg }; next }
		if (index(test, "/") == 0) cnt[action]++
		if (action == "fail") { nft++; ftest[nft] = test; fpkg[nft] = pkg }
	}
}
END {
	for (i = 1; i <= nft; i++) {
		leaf = 1
		for (j = 1; j <= nft; j++) if (j != i && fpkg[j] == fpkg[i] && index(ftest[j], ftest[i] "/") == 1) { leaf = 0; break }
		if (leaf) { msg = out[fpkg[i] SUBSEP ftest[i]]; sub(/\n+$/, "", msg); addfail(fpkg[i] "." ftest[i], msg); failedpkg[fpkg[i]] = 1 }
	}
	for (i = 1; i <= npf; i++) {
		p = pf[i]
		if (p in failedpkg) continue
		msg = build[p] != "" ? build[p] : out[p SUBSEP ""]
		sub(/\n+$/, "", msg)
		addfail(p, msg)
	}
	emit(cnt["pass"] + 0, cnt["fail"] + 0, cnt["skip"] + 0)
}' "$work/out"
}

parse_pytest() {
	clean <"$work/out" | awk -v maxf="$max_failures" -v maxmsg="$MAX_MESSAGE" "$AWK_LIB"'
/^___+ .* ___+$/ { hdr = $0; sub(/^_+ /, "", hdr); sub(/ _+$/, "", hdr); inblk = 1; next }
/^===/ { inblk = 0 }
inblk && /^E / { l = substr($0, 2); sub(/^ +/, "", l); blk[hdr] = blk[hdr] l "\n"; next }
inblk && /^[^ ].*:[0-9]+: / && !(hdr in loc) { loc[hdr] = $0 }
/^(FAILED|ERROR) / {
	line = $0; sub(/^(FAILED|ERROR) /, "", line)
	name = line; msg = ""
	if ((i = index(line, " - ")) > 0) { name = substr(line, 1, i - 1); msg = substr(line, i + 3) }
	key = name; if ((i = index(key, "::")) > 0) key = substr(key, i + 2); gsub(/::/, ".", key)
	if (key in blk) { msg = blk[key]; if (key in loc) msg = loc[key] "\n" msg; sub(/\n+$/, "", msg) }
	addfail(name, msg)
}
/ in [0-9.]+s/ && /[0-9]+ (passed|failed|skipped|errors?|deselected|xfailed|xpassed)/ { summary = $0 }
END {
	n = split(summary, w, /[ ,=]+/)
	for (i = 2; i <= n; i++) if (w[i - 1] ~ /^[0-9]+$/) c[w[i]] += w[i - 1]
	if (summary == "") emit("", "", "")
	else emit(c["passed"] + 0, c["failed"] + c["error"] + c["errors"], c["skipped"] + 0)
}'
}

parse_cargo() {
	clean <"$work/out" | awk -v maxf="$max_failures" -v maxmsg="$MAX_MESSAGE" "$AWK_LIB"'
/^test .* \.\.\. FAILED$/ { name = $0; sub(/^test /, "", name); sub(/ \.\.\. FAILED$/, "", name); nfl++; fl[nfl] = name }
/^---- .* stdout ----$/ { cur = $0; sub(/^---- /, "", cur); sub(/ stdout ----$/, "", cur); next }
/^(failures:|test result:)/ { cur = "" }
/^stack backtrace:/ { skipbt = cur; next }
cur != "" && skipbt != cur && !/^note: (run with|Some details)/ { msg[cur] = msg[cur] $0 "\n" }
/^test result: / {
	seen = 1
	if (match($0, /[0-9]+ passed/)) c["passed"] += substr($0, RSTART, RLENGTH) + 0
	if (match($0, /[0-9]+ failed/)) c["failed"] += substr($0, RSTART, RLENGTH) + 0
	if (match($0, /[0-9]+ ignored/)) c["ignored"] += substr($0, RSTART, RLENGTH) + 0
}
END {
	for (i = 1; i <= nfl; i++) { m = msg[fl[i]]; sub(/\n+$/, "", m); addfail(fl[i], m) }
	if (seen) emit(c["passed"] + 0, c["failed"] + 0, c["ignored"] + 0); else emit("", "", "")
}'
}

# npm: whatever the test script runs. TAP (node --test), jest and mocha
# summaries are read; anything else gives no counts.
parse_npm() {
	clean <"$work/out" | awk -v maxf="$max_failures" -v maxmsg="$MAX_MESSAGE" "$AWK_LIB"'
function flush() { if (tap != "") { sub(/\n+$/, "", tapmsg); addfail(tap, tapmsg) }; tap = ""; tapmsg = ""; inerr = 0 }
function jflush() { if (jname != "") { sub(/\n+$/, "", jmsg); addfail(jname, jmsg) }; jname = ""; jmsg = ""; jlines = 0 }
/^[ \t]*not ok [0-9]+ - / { flush(); tap = $0; sub(/^[ \t]*not ok [0-9]+ - /, "", tap); sub(/ # .*$/, "", tap); next }
tap != "" {
	if ($0 ~ /^[ \t]*\.\.\.[ \t]*$/) { flush(); next }
	match($0, /^[ \t]*/); ind = RLENGTH
	if (inerr) {
		if ($0 ~ /^[ \t]*$/) next
		if (ind > errind) { l = $0; sub(/^[ \t]+/, "", l); tapmsg = tapmsg l "\n"; next }
		inerr = 0
	}
	l = $0; sub(/^[ \t]+/, "", l)
	if (l ~ /^error: *[|>]-?$/) { inerr = 1; errind = ind; next }
	if (l ~ /^(location|error):/) { tapmsg = tapmsg l "\n" }
	next
}
/^[ \t]*● / && !/● Console/ {
	jflush(); name = $0; sub(/^[ \t]*● /, "", name)
	if (!(name in jseen)) { jseen[name] = 1; jname = name }
	next
}
/^(Tests|Test Suites|Snapshots|Time): / { jflush() }
jname != "" && !/^[ \t]*$/ && jlines < 15 { l = $0; sub(/^[ \t]+/, "", l); jmsg = jmsg l "\n"; jlines++ }
/^# (pass|fail|skipped) [0-9]+$/ { tapc[$2] = $3; tapseen = 1 }
/^Tests: +/ {
	jest = 1
	if (match($0, /[0-9]+ passed/)) jc["passed"] = substr($0, RSTART, RLENGTH) + 0
	if (match($0, /[0-9]+ failed/)) jc["failed"] = substr($0, RSTART, RLENGTH) + 0
	if (match($0, /[0-9]+ skipped/)) jc["skipped"] = substr($0, RSTART, RLENGTH) + 0
}
/^[ \t]+[0-9]+ passing/ { mocha = 1; mc["passed"] = $1 }
/^[ \t]+[0-9]+ failing/ { mocha = 1; mc["failed"] = $1 }
/^[ \t]+[0-9]+ pending/ { mocha = 1; mc["skipped"] = $1 }
END {
	flush(); jflush()
	if (tapseen) emit(tapc["pass"] + 0, tapc["fail"] + 0, tapc["skipped"] + 0)
	else if (jest) emit(jc["passed"] + 0, jc["failed"] + 0, jc["skipped"] + 0)
	else if (mocha) emit(mc["passed"] + 0, mc["failed"] + 0, mc["skipped"] + 0)
	else emit("", "", "")
}'
}

parse_make() {
	awk -v maxf=0 -v maxmsg=0 "$AWK_LIB"'END { emit("", "", "") }' </dev/null
}

results=$("parse_$runner") || results='"passed":null,"failed":null,"skipped":null,"failures":[],"failures_omitted":0'

if ((code == 0)); then
	status=passed
elif [[ $results =~ \"failed\":[1-9] || ! $results =~ \"failures\":\[\] ]]; then
	status=failed
else
	status=error # the runner failed without a test failing: a build error, a crash, no tests
fi
results="\"exit_code\":$code,$results"
if [[ $status != passed && $results =~ \"failures\":\[\] ]]; then
	tail=$(clean <"$work/raw" | tail -n "$TAIL_LINES" | tail -c "$TAIL_BYTES")
	[[ $runner == go ]] && [[ -z $tail ]] && tail=$(grep -v '^{' "$work/out" | clean | tail -n "$TAIL_LINES" | tail -c "$TAIL_BYTES")
	results+=",\"output_tail\":$(json_str "$tail")"
fi
report "$status" "" "$results"
exit 0
