#!/usr/bin/env bash
# Installs the Debian packages autocompress needs (only the missing ones), then
# configures and builds. Idempotent: a second run only rebuilds what changed.
#
#   scripts/setup.sh [--sanitize] [--build-dir DIR]
#
# --sanitize builds with AddressSanitizer and UndefinedBehaviorSanitizer (default
# directory build-sanitize); the plain build goes to build/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sanitize=OFF
build_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=ON ;;
    --build-dir) build_dir="$2"; shift ;;
    *) echo "setup.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$build_dir" ]; then
  if [ "$sanitize" = ON ]; then build_dir="$root/build-sanitize"; else build_dir="$root/build"; fi
fi

packages=(build-essential cmake pkg-config libopenblas-openmp-dev libconfig-dev libcjson-dev
          libcmocka-dev gnuplot-nox curl libpcre2-dev fortunes libpython3.11-stdlib
          libmicrohttpd-dev libcurl4-openssl-dev python3-venv libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# nvcc is not always on PATH even where the toolkit is installed.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# MPI (data-parallel ranks) is built whenever it is installed, as it is above
cmake -S "$root" -B "$build_dir" -DAC_SANITIZE="$sanitize" -DAC_MPI="${AC_MPI:-AUTO}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
echo "setup: built in $build_dir"

# The official OpenAI client, for the server's compatibility test (tests/cli/serve_openai.sh),
# in a virtualenv inside the build directory; pip runs only when the import fails.
pyenv="$build_dir/pyenv"
[ -x "$pyenv/bin/python" ] || python3 -m venv "$pyenv"
if ! "$pyenv/bin/python" -c "import openai" >/dev/null 2>&1; then
  echo "setup: installing the openai client into $pyenv"
  "$pyenv/bin/python" -m pip install -q --disable-pip-version-check openai
fi
