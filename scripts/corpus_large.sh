#!/usr/bin/env bash
# Gathers the two large corpora the experiment parents train on (more than ten times the
# small ones of scripts/corpus.sh, which stay for the tests and the quickstart):
#
#   DIR/prose.txt    English prose in fortune format ("%" line after each document):
#                    every fortune entry (scripts/corpus.sh), every entry of the
#                    Collaborative International Dictionary of English (dict-gcide: the
#                    1913 Webster's with WordNet additions), and every WordNet synset as
#                    "word, word: gloss" (wordnet-base)
#   DIR/code.list    source files, one path a line: the Python standard library of
#                    scripts/corpus.sh, then the C sources and headers of the Linux
#                    kernel's core folders (linux-source-6.1: kernel mm fs net lib ipc
#                    block crypto security init io_uring), bytewise sorted
#   DIR/MANIFEST     package versions, document, file and byte counts, sha256 of prose.txt
#                    and of the code list's contents
#
#   scripts/corpus_large.sh [DIR]          (default: build/corpus-large under the repository)
#
# Missing Debian packages are installed. Nothing is sampled: the output depends only on
# the installed package versions.
set -euo pipefail
export LC_ALL=C

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/build/corpus-large}
gcide=/usr/share/dictd/gcide
wordnet=/usr/share/wordnet
kernel_tar=/usr/src/linux-source-6.1.tar.xz
kernel_dirs=(kernel mm fs net lib ipc block crypto security init io_uring)

need=()
[ -f "$gcide.dict.dz" ] || need+=(dict-gcide)
[ -f "$wordnet/data.noun" ] || need+=(wordnet-base)
[ -f "$kernel_tar" ] || need+=(linux-source-6.1)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "corpus_large: installing ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${need[@]}"
fi

small="$root/build/corpus"
[ -f "$small/SUMMARY" ] || "$root/scripts/corpus.sh" "$small"

rm -rf "$out/code" "$out/prose.txt" "$out/code.list" "$out/MANIFEST"
mkdir -p "$out/code"

# ---- prose ----
python3 - "$small/prose.txt" "$gcide" "$wordnet" "$out/prose.txt" <<'EOF'
import base64, gzip, sys
fortunes, gcide, wordnet, out_path = sys.argv[1:]
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

def b64_number(s):  # dictd's index numbers: base64 digits, most significant first
    n = 0
    for c in s:
        n = n * 64 + B64.index(c)
    return n

def clean(text):  # a document never holds a line that is just "%"
    lines = [l.rstrip() for l in text.splitlines()]
    lines = [l for l in lines if l.strip() != "%"]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)

counts = {"fortune": 0, "gcide": 0, "wordnet": 0}
with open(out_path, "w", encoding="utf-8") as out:
    def emit(kind, text):
        text = clean(text)
        if text:
            out.write(text + "\n%\n")
            counts[kind] += 1
    with open(fortunes, encoding="utf-8", errors="replace") as f:
        for entry in f.read().split("\n%\n"):
            emit("fortune", entry)
    data = gzip.open(gcide + ".dict.dz").read()
    seen = set()
    with open(gcide + ".index", encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3 or fields[0].startswith("00-database") or fields[0].startswith("00database"):
                continue
            span = (b64_number(fields[1]), b64_number(fields[2]))
            if span in seen:
                continue
            seen.add(span)
            emit("gcide", data[span[0]:span[0] + span[1]].decode("utf-8", errors="replace"))
    for pos in ("noun", "verb", "adj", "adv"):
        with open(f"{wordnet}/data.{pos}", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue  # the licence header
                head, gloss = line.split("|", 1)
                fields = head.split()
                n_words = int(fields[3], 16)
                words = [fields[4 + 2 * i].replace("_", " ") for i in range(n_words)]
                emit("wordnet", ", ".join(words) + ": " + gloss.strip())
print(" ".join(f"{k}={v}" for k, v in counts.items()))
EOF
prose_docs=$(python3 -c 'import sys; print(open(sys.argv[1], encoding="utf-8").read().count("\n%\n"))' "$out/prose.txt")

# ---- code ----
tar -xJf "$kernel_tar" -C "$out/code" "${kernel_dirs[@]/#/linux-source-6.1/}"
(cd "$out/code" && find linux-source-6.1 -type f \( -name '*.c' -o -name '*.h' \) | sort) >"$out/.kernel.rel"
{
  cat "$small/code.list"
  sed "s|^|$out/code/|" "$out/.kernel.rel"
} >"$out/code.list"
rm -f "$out/.kernel.rel"

code_files=$(wc -l <"$out/code.list")
code_bytes=$(tr '\n' '\0' <"$out/code.list" | xargs -0 cat | wc -c)
code_sha=$(tr '\n' '\0' <"$out/code.list" | xargs -0 cat | sha256sum | cut -d' ' -f1)
{
  echo "packages: $(dpkg-query -W -f='${Package} ${Version}; ' fortunes dict-gcide wordnet-base linux-source-6.1 libpython3.11-stdlib 2>/dev/null)"
  echo "prose: $prose_docs documents, $(wc -c <"$out/prose.txt") bytes, sha256 $(sha256sum "$out/prose.txt" | cut -d' ' -f1)"
  echo "code: $code_files files ($(wc -l <"$small/code.list") Python stdlib, the rest Linux ${kernel_dirs[*]}), $code_bytes bytes, sha256 $code_sha"
} | tee "$out/MANIFEST"
echo "corpus_large: written to $out"
