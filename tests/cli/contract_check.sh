#!/usr/bin/env bash
# `autocompress contract check`: exit codes, the printout, and FILE:LINE errors on stderr.
# Usage: contract_check.sh AUTOCOMPRESS_BINARY SOURCE_DIR
set -u
cli=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# run EXPECTED_RC ARGS...: runs the binary, stdout to $tmp/out, stderr to $tmp/err
run() {
    local want=$1
    shift
    "$cli" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ "$rc" -eq "$want" ] || fail "autocompress $*: exit $rc, want $want; stderr: $(cat "$tmp/err")"
}

[ -x "$cli" ] || fail "no autocompress binary at $cli (did the build link it?)"

examples=$src/examples/contracts
bad=$src/tests/contracts/bad

# the six examples parse, each is printed
run 0 contract check "$examples"/*.cfg
for name in rtx5070-npc rtx5080-coding h100-datacenter cpu-latency cpu-long-context cpu-throughput; do
    grep -q "^contract $name " "$tmp/out" || fail "no printout for $name"
done
[ -s "$tmp/err" ] && fail "stderr not empty for valid contracts: $(cat "$tmp/err")"
run 0 contract check "$examples/h100-datacenter.cfg"
grep -q ">= 7330" "$tmp/out" || fail "h100 printout lacks the throughput target"
grep -q "data_parallel    8" "$tmp/out" || fail "h100 printout lacks data_parallel 8"

# one bad file among good ones: exit 1, the good one still printed, the error names FILE:LINE
run 1 contract check "$examples/rtx5070-npc.cfg" "$bad/bad-device.cfg" "$examples/cpu-latency.cfg"
grep -q "^contract rtx5070-npc " "$tmp/out" || fail "good contract not printed before the bad one"
grep -q "^contract cpu-latency " "$tmp/out" || fail "good contract not printed after the bad one"
[[ $(head -n 1 "$tmp/err") == "$bad/bad-device.cfg:4: "*gpu0* ]] || fail "bad-device error: $(cat "$tmp/err")"

# every malformed contract is rejected with FILE:LINE: on stderr
count=0
for f in "$bad"/*.cfg; do
    run 1 contract check "$f"
    [[ $(head -n 1 "$tmp/err") =~ ^"$f":[0-9]+:\  ]] || fail "$f: error lacks FILE:LINE: $(cat "$tmp/err")"
    count=$((count + 1))
done
[ "$count" -ge 12 ] || fail "only $count malformed contracts under $bad"

# the refused fields are named (the files also pass through the loop above)
for pair in "tensor-parallel.cfg:hardware.tensor_parallel = 2: not supported" \
            "zero-output.cfg:workload.output_tokens = 0: must be > 0" \
            "too-many-threads.cfg:hardware.threads = 100000: at most 4096"; do
    run 1 contract check "$bad/${pair%%:*}"
    grep -qF "${pair#*:}" "$tmp/err" || fail "${pair%%:*}: want \"${pair#*:}\": $(cat "$tmp/err")"
done

# with no memory target, the device's memory bounds the memory; replicas are explained
run 0 contract check "$examples/h100-datacenter.cfg"
grep -q "memory_gib *<= 80 (hardware.memory_gib" "$tmp/out" || fail "h100: no memory bound: $(cat "$tmp/out")"

# --parent: routed experts below the parent's top_k (read here from its config.json)
parent=$src/tests/fixtures/nemotron_h/hybrid_f32
top_k=$(grep -o '"num_experts_per_tok": *[0-9]*' "$parent/config.json" | grep -o '[0-9]*$')
[ -n "$top_k" ] && [ "$top_k" -ge 2 ] || fail "the fixture's top_k: '$top_k'"
space() { # space FEWEST: a contract whose fewest routed experts is FEWEST
    printf 'name = "k";\nhardware = { device = "cpu"; };\n'
    printf 'workload = { batch = 1; input_tokens = 3; output_tokens = 2; };\ntargets = { latency_ms = 10.0; };\n'
    printf 'search_space = { hidden_sizes = [64]; mamba_heads = { values = [8]; }; routed_experts = [8, %d];\n' "$1"
    printf '  routed_ffn = [32]; shared_ffn = [48]; };\n'
}
space "$top_k" >"$tmp/k-ok.cfg"
space $((top_k - 1)) >"$tmp/k-bad.cfg"
run 0 contract check "$tmp/k-bad.cfg" # alone, the contract is well formed
run 0 contract check --parent "$parent" "$tmp/k-ok.cfg"
run 1 contract check --parent "$parent" "$tmp/k-ok.cfg" "$tmp/k-bad.cfg"
grep -q "^contract k " "$tmp/out" || fail "the good contract was not printed beside the bad one"
grep -qF "$tmp/k-bad.cfg: search_space.routed_experts[1] = $((top_k - 1)) is below the parent's top_k (num_experts_per_tok) $top_k" \
    "$tmp/err" || fail "routed experts below top_k: $(cat "$tmp/err")"
run 1 contract check --parent "$tmp/no-parent" "$tmp/k-ok.cfg"
grep -qF "$tmp/no-parent" "$tmp/err" || fail "a missing parent is not named: $(cat "$tmp/err")"

# a missing file fails and is named
run 1 contract check "$tmp/absent.cfg"
grep -qF "$tmp/absent.cfg" "$tmp/err" || fail "missing file not named: $(cat "$tmp/err")"

# usage errors
run 2 contract check
run 2 contract
run 2 contract frobnicate "$examples/rtx5070-npc.cfg"
grep -q "unknown subcommand" "$tmp/err" || fail "unknown subcommand not reported"
run 0 contract --help
grep -qF "contract check [--parent DIR] FILE" "$tmp/out" || fail "help text"

echo "contract_check: ok ($count malformed contracts rejected)"
