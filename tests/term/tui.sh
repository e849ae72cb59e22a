#!/usr/bin/env bash
# `kvad tui` in a real terminal (tmux): the conversation and its live dashboard, Esc stopping an
# answer, `p` reloading the model in each weight format it offers while the conversation stays,
# /set, a narrow window, Ctrl-D.
#   tests/term/tui.sh KVAD WORK
set -euo pipefail
KVAD=$1 WORK=$2
mkdir -p "$WORK" && rm -f "$WORK"/term.rc
source "$(dirname "$0")/lib.sh"
SCREEN_JOIN=  # full-screen: its rows as it draws them
Q3=$WORK/tiny-qwen3
[ -f "$Q3/config.json" ] || "$KVAD" synth --arch qwen3 --preset tiny --std 0.1 --out "$Q3" >/dev/null
STORED=$("$KVAD" show "$Q3" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["format"].split()[1])')

# A fresh kvad home: each reload below quantises and caches anew, so the loader writes its note
# ("quantised to q8, cached to ...") every run.
rm -rf "$WORK/home"
start_term "LANG=C.UTF-8 KVAD_HOME='$WORK/home' '$KVAD' tui '$Q3' -c 4096 -n 24 --temperature 0 -t 1"
wait_for 'backend +cpu '"$STORED"
wait_for 'p cycles +f32 bf16 q8 q4'
pass "the dashboard names the model's format and the formats p cycles through"

# The keys on the status line: all of them in 120 columns, a shorter wording whole in 60.
wait_for '^Enter sends · Esc stops an answer · Tab: dashboard \(p format, r reset, q quit\) · F2 format · Ctrl-D quits$' 5
tm resize-window -t t -x 60 -y 40
wait_for '^Enter send · Esc stop · Tab dashboard · F2 format · \^D quit$' 5
tm resize-window -t t -x 120 -y 40
wait_for 'p cycles +f32 bf16 q8 q4' 5
pass "the status line says the keys in a wording that fits the window"

# A turn: the answer appears beside live figures (decode tok/s, first token, the context used).
type_line 'hello there'
wait_for '^you: hello there'
wait_for 'last answer +24 tokens, length' 30
wait_for 'decode +[0-9.]+ tok/s'
wait_for 'first token +[0-9]+ ms'
wait_for 'context +[1-9][0-9]* / 4096'
screen | grep -q '^model: ' || { echo "FAIL: no answer shown"; screen; exit 1; }
pass "a turn shows the answer, decode tok/s, time to first token and the context used"

# Esc stops a long answer; the answer so far is kept. (4,000 tokens: a fast machine decodes the
# tiny model at ~800 tok/s, so a shorter answer can end before the Esc arrives.)
type_line '/set max_tokens 4000'
wait_for '\(max_tokens = 4000\)'
type_line 'tell me more'
wait_for 'answering: Esc stops' 10
keys Escape
wait_for 'last answer +[0-9]+ tokens, cancelled' 20
pass "Esc stops an answer"

# p (on the dashboard, after Tab) reloads in every format in turn, back to the first; the
# conversation stays on screen, and the turn after a reload is prefilled from scratch. Either
# question counts as the conversation: how long the stopped answer is depends on when the Esc
# arrived, and a 239-token one (a busy CI host) pushed the first question off the 40 rows.
formats=(f32 bf16 q8 q4)
start=0
for i in "${!formats[@]}"; do [ "${formats[$i]}" = "$STORED" ] && start=$i; done
keys Tab
wait_for 'dashboard \(p q r, Tab back\)' 5
for step in 1 2 3 4; do
  want=${formats[$(((start + step) % 4))]}
  keys p
  wait_for "\(now cpu $want: the conversation is kept" 60
  wait_for "backend +cpu $want" 5
  # What the loader wrote to stderr is on the status line, not written over the screen (which
  # scrolled it by a row: ncurses then drew every change one row off).
  screen | head -1 | grep -q 'dashboard (p q r, Tab back)' || { echo "FAIL: the screen scrolled after reloading as $want"; screen; exit 1; }
  case $want in q8|q4) wait_for "· kvad: quantised to $want, cached to" 5 ;; esac
  screen | grep -qE '^you: (hello there|tell me more)' || { echo "FAIL: the conversation is gone after reloading as $want"; screen; exit 1; }
done
keys Tab
type_line '/set max_tokens 8'
type_line 'once more'
wait_for 'last answer +8 tokens' 30
wait_for 'last prompt +[0-9]+ \(0 cached\)' 5
pass "p reloads as ${formats[*]} in turn, keeping the conversation"

# A narrow window: the dashboard gives way, the conversation and input stay.
tm resize-window -t t -x 60 -y 30
sleep 0.5
if screen | grep -q 'backend'; then echo "FAIL: the dashboard is drawn in 60 columns"; screen; exit 1; fi
wait_for '^you: once more' 5
tm resize-window -t t -x 130 -y 40
wait_for 'backend +cpu ' 5
pass "a narrow window hides the dashboard; widening brings it back"

keys C-d
[ "$(wait_exit)" = 0 ] || { echo "FAIL: tui exit status"; exit 1; }
pass "Ctrl-D leaves with exit 0"

# The GPU configurations (lavapipe, named with --device gpu:0): the dashboard says where the model
# runs, p cycles the CPU's formats and then the GPU's, and a turn on each device answers.
if "$KVAD" devices | grep -q '^gpu:0 '; then
  rm -f "$WORK"/term.rc
  start_term "LANG=C.UTF-8 KVAD_HOME='$WORK/home' '$KVAD' tui '$Q3' -c 4096 -n 8 --temperature 0 -t 1 --device gpu:0 -q bf16"
  wait_for 'backend +gpu:0 bf16'
  wait_for 'p cycles +f32 bf16 q8 q4'
  wait_for 'then gpu:0 +bf16 q8 q4'
  type_line 'hello there'
  wait_for 'last answer +8 tokens, length' 60
  keys Tab
  wait_for 'dashboard \(p q r, Tab back\)' 5
  keys p
  wait_for '\(now gpu:0 q8: the conversation is kept' 60
  keys p p
  wait_for '\(now cpu f32: the conversation is kept' 60
  wait_for 'backend +cpu f32' 5
  keys Tab
  type_line 'once more'
  wait_for 'last answer +8 tokens' 30
  keys C-d
  [ "$(wait_exit)" = 0 ] || { echo "FAIL: tui exit status (gpu)"; exit 1; }
  pass "p cycles cpu and gpu configurations; turns answer on both devices"
else
  [ -z "${KVAD_REQUIRE_VULKAN:-}" ] || { echo "FAIL: no Vulkan device (KVAD_REQUIRE_VULKAN=1)"; exit 1; }
  echo "SKIPPED: no Vulkan device for the GPU configurations"
fi
