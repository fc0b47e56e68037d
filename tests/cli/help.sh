#!/usr/bin/env bash
# `autocompress --help` and every command's --help: for each command the top-level help
# lists (and each subcommand of a command that lists its own, like costmodel and
# contract), --help and -h print a usage line on stdout, nothing on stderr, and exit 0;
# every --option the help lists is one the parser knows; an unknown option exits 2
# naming it. `autocompress --version` prints the project's version.
# Usage: help.sh AUTOCOMPRESS_BINARY SOURCE_DIR
set -u
ac=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unknown=--no-such-option-xyz
checked=0

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# run ARGS...: runs the binary, stdout to $tmp/out, stderr to $tmp/err, the exit code in $rc
run() {
    timeout 60 "$ac" "$@" </dev/null >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

# The names under "commands:" in the listing on stdin.
listed_commands() {
    sed -n '/^commands:$/,/^$/s/^  \([a-z][a-z0-9-]*\) .*/\1/p'
}

# "NAME" or "NAME META" for each option row of the help on stdin: the left column is 26
# characters wide, or on a line of its own (the next line then starts with 29 spaces).
listed_options() {
    awk '
        BEGIN { indent = sprintf("%29s", "") }
        function emit(left) { sub(/^ +/, "", left); sub(/ +$/, "", left); print left }
        pending != "" { emit(substr($0, 1, 29) == indent ? pending : substr(pending, 1, 28)); pending = "" }
        /^  --/ { pending = $0 }
        END { if (pending != "") emit(substr(pending, 1, 28)) }
    '
}

# check_help CMD...: -h and --help print the same usage of CMD on stdout only and exit 0;
# $tmp/out keeps it.
check_help() {
    local flag
    for flag in -h --help; do
        [ -f "$tmp/out" ] && mv "$tmp/out" "$tmp/short"
        run "$@" "$flag"
        [ "$rc" -eq 0 ] || fail "autocompress $* $flag: exit $rc, want 0"
        [ -s "$tmp/err" ] && fail "autocompress $* $flag wrote on stderr: $(cat "$tmp/err")"
        grep -q "^usage: autocompress $* " "$tmp/out" || fail "autocompress $* $flag: no 'usage: autocompress $*' line"
    done
    cmp -s "$tmp/short" "$tmp/out" || fail "autocompress $* -h and --help differ"
}

# check_unknown CMD...: an unknown option is a usage error that names it.
check_unknown() {
    run "$@" "$unknown"
    [ "$rc" -eq 2 ] || fail "autocompress $* $unknown: exit $rc, want 2"
    grep -q -- "$unknown" "$tmp/err" || fail "autocompress $* $unknown: not named: $(cat "$tmp/err")"
}

# check_option CMD... -- NAME [META]: the parser knows --NAME. One with a value, given
# none, asks for it; a switch is taken, so the unknown option after it is what fails.
check_option() {
    local cmd=() name meta
    while [ "$1" != -- ]; do cmd+=("$1"); shift; done
    name=$2
    meta=${3-}
    if [ -n "$meta" ]; then
        run "${cmd[@]}" "$name"
        [ "$rc" -eq 2 ] && grep -qF -- "'$name' needs a value" "$tmp/err" ||
            fail "autocompress ${cmd[*]} $name (listed as taking $meta): exit $rc: $(cat "$tmp/err")"
    else
        run "${cmd[@]}" "$name" "$unknown"
        [ "$rc" -eq 2 ] && grep -qF -- "unknown option '$unknown'" "$tmp/err" ||
            fail "autocompress ${cmd[*]} $name (listed as a switch): exit $rc: $(cat "$tmp/err")"
    fi
    checked=$((checked + 1))
}

# check_command CMD...: its help, its unknown option, and every option its help lists;
# a command that lists subcommands instead gets each of them checked.
check_command() {
    local help subs sub name meta
    check_help "$@"
    help=$(cat "$tmp/out")
    check_unknown "$@"
    subs=$(listed_commands <<<"$help")
    if [ -n "$subs" ]; then
        for sub in $subs; do check_command "$@" "$sub"; done
        return
    fi
    while read -r name meta; do
        [ -n "$name" ] && check_option "$@" -- "$name" $meta
    done < <(listed_options <<<"$help")
}

[ -x "$ac" ] || fail "no autocompress binary at $ac (did the build link it?)"

run --version
[ "$rc" -eq 0 ] || fail "--version: exit $rc"
version=$(sed -n 's/^project(autocompress VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ "$(head -1 "$tmp/out")" = "autocompress $version" ] || fail "--version printed '$(cat "$tmp/out")', want 'autocompress $version'"
grep -Eq '^built with:( (cuda|mpi|nccl))*$' "$tmp/out" || fail "--version: no 'built with:' line: $(cat "$tmp/out")"
run -V
[ "$(head -1 "$tmp/out")" = "autocompress $version" ] || fail "-V printed '$(cat "$tmp/out")'"

run --help
[ "$rc" -eq 0 ] || fail "--help: exit $rc"
[ -s "$tmp/err" ] && fail "--help wrote on stderr: $(cat "$tmp/err")"
grep -q "^usage: autocompress " "$tmp/out" || fail "--help: no usage line"
commands=$(listed_commands <"$tmp/out")
for want in contract costmodel search; do
    grep -qx "$want" <<<"$commands" || fail "--help does not list $want: $(cat "$tmp/out")"
done
run frobnicate
[ "$rc" -eq 2 ] && grep -q "frobnicate" "$tmp/err" || fail "unknown command: exit $rc: $(cat "$tmp/err")"

count=0
for cmd in $commands; do
    check_command "$cmd"
    count=$((count + 1))
done
for sub in "costmodel validate" "costmodel predict" "contract check"; do
    check_help $sub
done
[ "$checked" -gt "$count" ] || fail "only $checked options found in the help of $count commands"
echo "help: ok ($count commands, $checked options)"
