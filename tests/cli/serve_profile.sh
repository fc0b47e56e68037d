#!/usr/bin/env bash
# In-situ profiling in the server: after a few requests, GET /admin/profile holds the
# decode and prefill steps of batch 1 with a row per layer of the served architecture,
# each beside the latency tables' prediction for its configuration, at a live/predicted
# ratio a real measurement gives (a row in the wrong unit or of the wrong configuration
# would be off by far more than a busy machine's factor); the layers' sum stays within
# the forward; the memory's weights are the served parameters in f32 and the residual is
# resident minus W + C + P + R. `admin profile` prints the table; the endpoint wants the
# token; with profile_every = 0 nothing is sampled until POST /admin/profile turns it on
# (bad bodies: 400 naming the field).
set -euo pipefail
ac=$1
src=$2
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
source "$src/tests/server/serve_lib.sh"
tmp=$serve_tmp
export AUTOCOMPRESS_ADMIN_TOKEN=profile-test-token
model="$src/examples/parent/prose"
tables="$src/examples/search/cpu-latency/tables.json"

printf 'slots = 1;\nthreads = 1;\nprofile_every = 1;\nprofile_tables = "%s";\n' "$tables" >"$tmp/server.cfg"
auth=(-H "Authorization: Bearer $AUTOCOMPRESS_ADMIN_TOKEN")
# prompts of about the tables' 256 input tokens, so prefill is compared where it was measured
long=$(printf 'the quick brown fox jumps over the lazy dog, %.0s' $(seq 1 12))

# profiled: a fresh server, three requests, its profile and status in $tmp
profiled() {
  serve_start "$ac" --model "$model" --config "$tmp/server.cfg"
  base="http://127.0.0.1:$port"
  local i
  for i in 1 2 3; do
    curl -sf -o /dev/null "$base/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"$i $long\", \"max_tokens\": 12, \"temperature\": 0}" ||
      fail "completion $i"
  done
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/admin/profile")" = 401 ] || fail "/admin/profile without a token"
  curl -sf "${auth[@]}" "$base/admin/profile" >"$tmp/profile.json" || fail "GET /admin/profile"
  curl -sf "${auth[@]}" "$base/admin/status" >"$tmp/status.json" || fail "GET /admin/status"
}

# The checks exit 3 when only the times are off (the sites' medians beside the forward's,
# live beside predicted): on a loaded machine preemption lands in the forward of most
# steps but in few of any one site's, so the measurement is made again on a fresh server
# until a deadline; any other failure fails at once.
deadline=$((SECONDS + 360))
attempt=0
while :; do
  attempt=$((attempt + 1))
  profiled
  rc=0
  python3 - "$tmp/profile.json" "$tmp/status.json" "$model/config.json" "$tables" <<'EOF' || rc=$?
import json, sys
p, status, config, tables = (json.load(open(f)) for f in sys.argv[1:5])
pattern = config["hybrid_override_pattern"]
layers, hidden = len(pattern), config["hidden_size"]
assert p["layers"] == layers and p["sample_every"] == 1, p
w = tables["workload"]
assert p["tables"]["batch"] == w["batch"] == 1 and p["tables"]["input_tokens"] == w["input_tokens"], p["tables"]
# the tables' row of each site, found here from the config (not from the server's keys)
def row(kind, **dims):
    for r in tables["rows"]:
        if r["kind"] == kind and r["hidden"] == hidden and all(r.get(k) == v for k, v in dims.items()):
            return r
    raise AssertionError(f"no {kind} {dims} row in the tables")
kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
dims = {"mamba": {"heads": config["mamba_num_heads"]}, "attention": {}, "mlp": {"ffn": config.get("intermediate_size")},
        "moe": {"experts": config["n_routed_experts"], "expert_ffn": config["moe_intermediate_size"],
                "shared_ffn": config["moe_shared_expert_intermediate_size"]}}
sites = [row(kinds[c], **dims[kinds[c]]) for c in pattern] + [row("embedding"), row("lm_head")]
def decode_us(r, c):
    return r["decode"]["a_us"] + r["decode"]["b_us"] * c
lo = w["cached_tokens"] + w["input_tokens"]
hi = lo + w["output_tokens"] - 2
shapes = {(s["phase"], s["batch"]): s for s in p["shapes"]}
decode, prefill = shapes[("decode", 1)], shapes[("prefill", 1)]
assert decode["samples"] >= 15 and prefill["samples"] == 3, (decode["samples"], prefill["samples"])
T, c0 = prefill["tokens_p50"], prefill["context_p50"]
assert 150 <= T <= 256 and c0 == 0, (T, c0)
c = min(max(decode["context_p50"], lo), hi)
def prefill_us(r):
    return decode_us(r, c0) + (r["prefill"]["median_us"] - decode_us(r, c0)) * (T - 1) / (lo - 1)
slow = []
for s, predict in ((decode, lambda r: decode_us(r, c)), (prefill, prefill_us)):
    assert "unpredicted_because" not in s, s.get("unpredicted_because")
    rows = s["rows"]
    assert len(rows) == layers + 3, len(rows)
    for i, letter in enumerate(pattern):
        assert rows[i]["layer"] == i and rows[i]["site"] == kinds[letter], rows[i]
    for r, t in zip(rows, sites):
        assert abs(r["predicted_us"] - predict(t)) <= 1e-6 * abs(predict(t)) + 1e-9, (s["phase"], r, predict(t))
        assert r["live_us"] > 0, r
    forward = rows[-1]
    assert forward["site"] == "forward", forward
    # sites_us sums the sites' medians, which the forward's median need not bound exactly
    if not 0.5 < forward["sites_us"] / forward["live_us"] < 1.2:
        slow.append(f"{s['phase']}: the sites' medians sum to {forward['sites_us']:.0f} us, the forward {forward['live_us']:.0f}")
    # microseconds on both sides: a unit slip would be 1000x (a busy machine, or one thread
    # against the tables' two, moves the ratio by far less)
    if not 0.01 < forward["live_us"] / forward["predicted_us"] < 100:
        slow.append(f"{s['phase']}: live {forward['live_us']:.0f} us against {forward['predicted_us']:.0f} predicted")
m = p["memory"]
assert m["weights_bytes"] == 4 * status["model"]["parameters"], (m, status["model"])
assert m["kv_bytes"] > 0 and m["state_bytes"] > 0 and m["activation_bytes"] > 0 and m["baseline_bytes"] > 0, m
assert m["residual_bytes"] == m["resident_bytes"] - m["baseline_bytes"] - m["accounted_bytes"], m
assert "predicted_eps_bytes" in m, m
if slow:
    print("; ".join(slow))
    sys.exit(3)
EOF
  [ $rc -eq 0 ] && break
  [ $rc -eq 3 ] || fail "the profile: $(head -c 600 "$tmp/profile.json")"
  [ $SECONDS -lt $deadline ] || fail "the times were still off after $attempt fresh servers (above)"
  serve_stop
done
[ $attempt -eq 1 ] || echo "serve_profile: the times held on fresh server $attempt"

"$ac" admin profile --server "$base" >"$tmp/table.txt" || fail "admin profile exited $?"
grep -q "^decode, batch 1:" "$tmp/table.txt" && grep -q "memory: resident" "$tmp/table.txt" ||
  fail "admin profile printed: $(cat "$tmp/table.txt")"
serve_stop

# paused from the start, then turned on at run time
printf 'slots = 1;\nprofile_every = 0;\n' >"$tmp/off.cfg"
serve_start "$ac" --model "$model" --config "$tmp/off.cfg"
base="http://127.0.0.1:$port"
complete() {
  curl -sf -o /dev/null "$base/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Why", "max_tokens": 4, "temperature": 0}' || fail "a completion"
}
shapes() { curl -sf "${auth[@]}" "$base/admin/profile" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(p["sample_every"], len(p["shapes"]))'; }
complete
[ "$(shapes)" = "0 0" ] || fail "paused, the profile is $(shapes)"
rate() { curl -s -o "$tmp/rate.json" -w '%{http_code}' "${auth[@]}" -X POST "$base/admin/profile" --data-binary "$1"; }
[ "$(rate '{"sample_every": -1}')" = 400 ] && grep -q sample_every "$tmp/rate.json" || fail "rate -1: $(cat "$tmp/rate.json")"
[ "$(rate '{"sample_every": 2, "x": 1}')" = 400 ] && grep -q "one field" "$tmp/rate.json" || fail "an extra field"
[ "$(rate '[]')" = 400 ] && grep -q "JSON object" "$tmp/rate.json" || fail "an array body"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/admin/profile" -d '{"sample_every": 1}')" = 401 ] ||
  fail "POST /admin/profile without a token"
[ "$(rate '{"sample_every": 1}')" = 200 ] || fail "rate 1: $(cat "$tmp/rate.json")"
complete
[ "$(shapes)" = "1 2" ] || fail "after turning it on, the profile is $(shapes)"
serve_stop
echo "serve_profile: ok"
