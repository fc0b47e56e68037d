#!/usr/bin/env bash
# `autocompress serve` through the official OpenAI Python client: greedy completions equal
# `autocompress generate`, streamed and not; logprobs and echo; seeded sampling; the model
# list; bad requests raise openai.BadRequestError (tests/server/openai_client.py). The
# client lives in the virtualenv scripts/setup.sh makes beside the binary (BUILD/pyenv);
# without it the test is skipped. The server stops on SIGTERM and must exit 0.
set -euo pipefail
ac=$1
src=$2
py="$(dirname "$ac")/pyenv/bin/python"
if [ ! -x "$py" ]; then
  echo "skip: no virtualenv at $(dirname "$ac")/pyenv (scripts/setup.sh makes it)"
  exit 77
fi
if ! "$py" -c "import openai" 2>/dev/null; then
  echo "skip: $py cannot import openai (scripts/setup.sh installs it)"
  exit 77
fi
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
model="$src/examples/parent/prose"
source "$src/tests/server/serve_lib.sh"
serve_start "$ac" --model "$model" --slots 4

"$py" "$src/tests/server/openai_client.py" --port "$port" --ac "$ac" --model "$model" || fail "the OpenAI client checks failed"
serve_stop
echo "serve_openai: ok"
