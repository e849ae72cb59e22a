#!/usr/bin/env bash
# A long load in a real terminal (tmux): while `kvad run -q q8` quantises a checkpoint for the
# first time, stderr shows a progress line, erased once the model is loaded.
# tests/models_nq_cache.cpp checks what it counts, and that a load from the cache reports nothing.
#   tests/term/load.sh KVAD WORK
set -euo pipefail
KVAD=$1 WORK=$2
mkdir -p "$WORK" && rm -f "$WORK"/term.rc
source "$(dirname "$0")/lib.sh"
export KVAD_HOME=$WORK/home
rm -rf "$KVAD_HOME"
M=$WORK/smollm2
# SmolLM2-135M's shapes in bf16 (270 MB): a q8 load takes seconds, past the line's half second.
[ -f "$M/config.json" ] || "$KVAD" synth --arch llama --preset smollm2-135m --out "$M" >/dev/null

# Reached through a path longer than the terminal is wide (as a deep clone's can be): the line must
# still fit one row, or erasing it leaves its first rows on the screen.
LONG=$WORK/a-folder-whose-name-is-long-enough-that-the-progress-line-would-not-fit-in-one-row-of-the-terminal
mkdir -p "$LONG" && ln -sfn "$M" "$LONG/smollm2"
start_term "'$KVAD' run -m '$LONG/smollm2' -q q8 -n 2 --temperature 0 --threads 1 'Hello'"
wait_for 'kvad: loading .*smollm2 \(to q8\) +\[[#.]+\] +[0-9]+% +[0-9]+ of [0-9]+ tensors' 60
first=$(screen | grep -oE '[0-9]+ of [0-9]+ tensors' | tail -1)
widest=$(screen | awk '{ if (length($0) > w) w = length($0) } END { print w + 0 }')
[ "$widest" -lt 120 ] || { echo "FAIL: the progress line fills the row ($widest columns) and wraps"; screen | tail -5; exit 1; }
wait_for 'kvad: quantised to q8, cached to' 120
[ "$(wait_exit 60)" = 0 ] || { echo "FAIL: kvad run exit status"; screen | tail -20; exit 1; }
if screen | grep -qE 'kvad: loading'; then echo "FAIL: the progress line was left on the screen"; screen | tail -20; exit 1; fi
pass "a quantising load shows its progress ($first at first sight), then erases it"

