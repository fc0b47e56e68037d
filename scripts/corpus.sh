#!/usr/bin/env bash
# Gathers the two small training corpora that autocompress trains and tests on:
#
#   DIR/prose.txt    English prose: Debian's `fortunes` (and `fortunes-min`) databases,
#                    every entry once, in fortune format (entries separated by "%" lines)
#   DIR/code/...     source code: the Python standard library's own modules (no tests,
#                    no generated tables), one file per document
#   DIR/code.list    the code files, one path a line, in byte order (LC_ALL=C sort)
#   DIR/SUMMARY      what was gathered: file, document and byte counts
#
#   scripts/corpus.sh [DIR]          (default: build/corpus under the repository)
#
# Environment: AC_FORTUNE_DIR (default /usr/share/games/fortunes), AC_STDLIB_DIR
# (default /usr/lib/python3.11). Missing Debian packages are installed. The output
# depends only on the installed package versions: file lists are sorted bytewise and
# nothing is sampled. Offensive databases (the off/ folder, names ending in -o, which
# Debian ships ROT13-encoded in fortunes-off) are never read. Terminal overstrikes
# ("_\bX", "X\bX") are reduced to the plain character.
set -euo pipefail
export LC_ALL=C

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/build/corpus}
fortune_dir=${AC_FORTUNE_DIR:-/usr/share/games/fortunes}
stdlib_dir=${AC_STDLIB_DIR:-/usr/lib/python3.11}

need=()
[ -d "$fortune_dir" ] || need+=(fortunes fortunes-min)
[ -f "$stdlib_dir/os.py" ] || need+=(libpython3.11-stdlib)
if [ ${#need[@]} -gt 0 ]; then
  echo "corpus: installing ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${need[@]}"
fi
[ -d "$fortune_dir" ] || { echo "corpus: no fortune databases in $fortune_dir" >&2; exit 1; }
[ -f "$stdlib_dir/os.py" ] || { echo "corpus: no Python standard library in $stdlib_dir" >&2; exit 1; }

# only what this script writes is replaced, never the rest of DIR
rm -rf "$out/code" "$out/prose.txt" "$out/code.list" "$out/SUMMARY"
mkdir -p "$out/code"

# ---- prose: every database file (not the .dat indexes, not the .u8 links) ----
fortune_files=()
while IFS= read -r f; do
  fortune_files+=("$f")
done < <(find "$fortune_dir" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! -name '*-o' | sort)
[ ${#fortune_files[@]} -gt 0 ] || { echo "corpus: no fortune databases in $fortune_dir" >&2; exit 1; }

# One entry per "%"-separated block; blank entries dropped; trailing blanks trimmed;
# exactly one "%" line after each entry.
for f in "${fortune_files[@]}"; do
  perl -pe '1 while s/[^\x08\n]\x08//g' "$f"
  printf '\n%%\n'
done | awk '
  function flush() {
    while (n > 0 && lines[n] ~ /^[ \t\r]*$/) n--
    start = 1
    while (start <= n && lines[start] ~ /^[ \t\r]*$/) start++
    if (start <= n) {
      for (i = start; i <= n; i++) print lines[i]
      print "%"
      entries++
    }
    n = 0
  }
  /^%\r?$/ { flush(); next }
  { lines[++n] = $0 }
  END { flush(); print entries > "/dev/stderr" }
' >"$out/prose.txt" 2>"$out/.entries"
prose_entries=$(cat "$out/.entries")
rm -f "$out/.entries"

# ---- code: the standard library's modules, without tests and generated tables ----
(cd "$stdlib_dir" && find . -name '*.py' -type f | sed 's|^\./||' |
  grep -Ev '^(test|site-packages|dist-packages|encodings|pydoc_data|config-[^/]*)/|(^|/)(tests?|idle_test)/' |
  sort) >"$out/.code.rel"
[ -s "$out/.code.rel" ] || { echo "corpus: no .py files under $stdlib_dir" >&2; exit 1; }
while IFS= read -r rel; do
  mkdir -p "$out/code/$(dirname "$rel")"
  cp "$stdlib_dir/$rel" "$out/code/$rel"
  printf '%s\n' "$out/code/$rel"
done <"$out/.code.rel" >"$out/code.list"
rm -f "$out/.code.rel"

code_files=$(wc -l <"$out/code.list")
code_bytes=$(tr '\n' '\0' <"$out/code.list" | xargs -0 cat | wc -c)
prose_bytes=$(wc -c <"$out/prose.txt")
{
  echo "prose: ${#fortune_files[@]} fortune databases from $fortune_dir ($(dpkg-query -W -f='fortunes ${Version}' fortunes 2>/dev/null || echo 'fortunes ?'))"
  echo "prose: $prose_entries entries, $prose_bytes bytes in prose.txt (with the % lines)"
  echo "code: $code_files files from $stdlib_dir ($(dpkg-query -W -f='libpython3.11-stdlib ${Version}' libpython3.11-stdlib 2>/dev/null || echo 'stdlib ?'))"
  echo "code: $code_bytes bytes"
} | tee "$out/SUMMARY"
echo "corpus: written to $out"
