# Sourced by scripts/llamacpp-check.sh and tests/bench/run_llamacpp_bench.sh (bash):
#   llamacpp_sources WORK PYTHON
# sets $llama to the llama.cpp vendored in the newest llama-cpp-python sdist in WORK
# (downloading it from PyPI with PYTHON's pip when there is none), unpacked there, with its
# converter patched to accept our tokenizer: convert_hf_to_gguf.py hashes how a tokenizer
# splits a test text and refuses hashes it does not know. Our tokenizer.json is byte-level
# BPE with the GPT-2 split regex (pre_tokenizer ByteLevel, use_regex true), so the build
# copy maps an unknown hash to "gpt-2" (the tools here give both engines token ids; only
# text prompts would depend on it).
llamacpp_sources() {
  local work=$1 python=$2 sdist unpacked base_py
  mkdir -p "$work"
  sdist=$(ls "$work"/llama_cpp_python-*.tar.gz 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$sdist" ]; then
    printf '== %s\n' "downloading the llama-cpp-python sdist" >&2
    "$python" -m pip download -q llama-cpp-python --no-binary :all: --no-deps -d "$work" >&2
    sdist=$(ls "$work"/llama_cpp_python-*.tar.gz | sort -V | tail -1)
  fi
  unpacked=$work/$(basename "$sdist" .tar.gz)
  [ -d "$unpacked" ] || tar -xzf "$sdist" -C "$work"
  llama=$unpacked/vendor/llama.cpp
  [ -f "$llama/convert_hf_to_gguf.py" ] || { echo "no vendor/llama.cpp in $sdist" >&2; return 2; }
  base_py=$llama/conversion/base.py
  [ -f "$base_py" ] || base_py=$llama/convert_hf_to_gguf.py
  grep -q "autocompress: unknown pre-tokenizer" "$base_py" && return 0
  "$python" - "$base_py" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
anchor = 'raise NotImplementedError("BPE pre-tokenizer was not recognized - update get_vocab_base_pre()")'
assert anchor in text, "the pre-tokenizer check moved; patch by hand"
indent = re.search(r"\n([ \t]*)" + re.escape(anchor), text).group(1)
patched = ('logger.warning("autocompress: unknown pre-tokenizer %s mapped to gpt-2", chkhsh)\n'
           + indent + 'return "gpt-2"  # autocompress: unknown pre-tokenizer\n' + indent + anchor)
open(path, "w").write(text.replace(anchor, patched, 1))
PY
}
