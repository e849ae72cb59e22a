#!/usr/bin/env bash
# The device tool sends the whole working tree (tracked files and untracked ones git does not
# ignore) with each call, and kvad's is over its 64 MiB (test fixtures, the default model). For the
# GPU run, `on` leaves git's index holding bench/gpu/device.sh alone and ignores everything else
# (.gpu/ is carried by name); `off` puts the index and .git/info/exclude back. Files on disk are
# never touched. Run `off` before any commit.
#   bench/gpu/slim-tree.sh on; run(carry=[".gpu/bundle.tar.xz"], ...); bench/gpu/slim-tree.sh off
set -euo pipefail
cd "$(dirname "$0")/../.."
G=$(git rev-parse --git-dir)
case ${1:-} in
  on)
    [ -f "$G/index.slim-backup" ] && { echo "slim-tree: already on (run: $0 off)" >&2; exit 1; }
    cp "$G/index" "$G/index.slim-backup"
    cp "$G/info/exclude" "$G/info/exclude.slim-backup" 2>/dev/null || : >"$G/info/exclude.slim-backup"
    git rm -r --cached -q .
    git add -f bench/gpu/device.sh
    echo '/*' >>"$G/info/exclude"
    echo "slim-tree: on; what travels: $(git ls-files | tr '\n' ' ')+ the carried paths" ;;
  off)
    [ -f "$G/index.slim-backup" ] || { echo "slim-tree: not on" >&2; exit 1; }
    mv "$G/index.slim-backup" "$G/index"
    mv "$G/info/exclude.slim-backup" "$G/info/exclude"
    echo "slim-tree: off" ;;
  *) echo "usage: $0 on|off" >&2; exit 2 ;;
esac
