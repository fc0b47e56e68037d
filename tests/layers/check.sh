#!/usr/bin/env bash
# The folder picture: every quoted #include of a library, kernel, probe or adapter source
# is an arrow from its folder to the included file's folder (public headers,
# "autocompress/*.h", are the API and draw none). The arrows must have no loop, so the
# folders stack into floors where every include points down. Prints the floors from the
# ground up; fails naming the loop.
#   tests/layers/check.sh [SOURCE_DIR]
set -euo pipefail
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root"

# A folder's name: module/x -> x; the backends' folders are the kernels' room.
folder_of() {
  local d=$1
  d=${d#module/}
  case "$d" in kernels/*) d=kernels ;; esac
  echo "$d"
}

# An include's folder: relative to module/ or the root, or to adapters/ for adapters.
include_folder() {
  local from_file=$1 inc=$2 dir
  dir=$(dirname "$inc")
  [ "$dir" = . ] && { dirname "$from_file"; return; }
  if [ -e "module/$inc" ]; then echo "module/$dir"
  elif [ -e "adapters/$inc" ] && [[ $from_file == adapters/* ]]; then echo "adapters/$dir"
  else echo "$dir"
  fi
}

edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
while IFS= read -r file; do
  from=$(folder_of "$(dirname "$file")")
  echo "$from $from" >>"$edges" # every folder stands in the picture
  while IFS= read -r inc; do
    case "$inc" in autocompress/*) continue ;; esac
    to=$(folder_of "$(include_folder "$file" "$inc")")
    [ "$to" != "$from" ] && echo "$to $from" >>"$edges"
  done < <(sed -nE 's/^#include "([^"]+)".*/\1/p' "$file")
done < <(find module kernels probes adapters \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) \
           -not -path 'module/include/*' | sort)

if ! order=$(tsort "$edges" 2>&1); then
  echo "layers: the folders' includes form a loop:" >&2
  echo "$order" | sed -n 's/^tsort: //p' >&2
  exit 1
fi
echo "layers: no loop; the floors from the ground up:"
echo "$order" | tr '\n' ' '
echo
