#!/usr/bin/env bash
# `kvad chat` in a real terminal (tmux): line editing and history, Ctrl-C at the prompt, blocks of
# several lines, /set, /save and /load (a conversation and a model), the context filling up, and
# typing while an answer streams. tests/cli_run.cpp has the same commands over a pipe.
#   tests/term/chat.sh KVAD WORK
set -euo pipefail
KVAD=$1 WORK=$2
mkdir -p "$WORK" && rm -f "$WORK"/term.rc "$WORK"/*.json
source "$(dirname "$0")/lib.sh"
export HOME=$WORK/home XDG_STATE_HOME=
mkdir -p "$HOME"
Q3=$WORK/tiny-qwen3
[ -f "$Q3/config.json" ] || "$KVAD" synth --arch qwen3 --preset tiny --std 0.1 --out "$Q3" >/dev/null

start_term "'$KVAD' chat '$Q3' -c 96 -n 12 --temperature 0 --threads 1 --system 'be brief'"
wait_for 'kvad chat: .*context 96'

# History and editing: Up brings back the last line, Backspace edits it, Enter sends the edit.
type_line '/set temperature 0.5'
wait_for '\(temperature = 0.5\)'
keys Up
wait_for '> /set temperature 0.5$' 5
keys BSpace; tm send-keys -t t -l '7'; keys Enter
wait_for '\(temperature = 0.7\)'
keys Up Up
wait_for '> /set temperature 0.5$' 5
keys Enter
wait_for '\(temperature = 0.5\)[[:space:]]*$' 5
pass "arrow keys recall earlier lines"

# Ctrl-C at the prompt abandons the line and says how to leave; the chat goes on.
tm send-keys -t t -l 'half typed'; keys C-c
wait_for '\(/quit or Ctrl-D to leave\)'
pass "Ctrl-C at the prompt"

# A block of lines between """ and a line continued with \ are one message each.
type_line '"""'; type_line 'first line'; type_line 'second line'; type_line '"""'
wait_for '^\[prompt [0-9]+ tokens'
type_line 'third \'; type_line 'fourth'
wait_count '^\[prompt [0-9]+ tokens' 2
type_line "/save $WORK/conv.json"
wait_for '\(saved [0-9]+ messages'
python3 - "$WORK/conv.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["messages"]
users = [x["content"] for x in m if x["role"] == "user"]
assert m[0] == {"role": "system", "content": "be brief"}, m[0]
assert users == ["first line\nsecond line", "third \nfourth"], users
PY
pass "multi-line messages (a \"\"\" block, a \\ continuation) and /save"

# /set shows what was set; a bad value is refused naming it, the old value kept.
type_line '/set top_p 2'
wait_for 'error: .*top_p'
type_line '/set'
wait_for 'temperature 0.5 .*top_p 0.95'
pass "/set"

# The context (96 tokens) fills: the oldest turns go, the system message stays, and the next turn
# reuses the shortened conversation's prefix.
for i in 1 2 3 4 5; do type_line "message number $i here"; sleep 0.3; done
wait_count '^\[prompt [0-9]+ tokens' 7 60
wait_for 'dropped the [0-9]+ oldest messages; the system message is kept' 5
# After a drop, the next turn reuses the shortened conversation (more than the system message cached).
screen | grep -A50 'oldest messages' | grep -m2 '^\[prompt' | tail -1 | grep -qE '\(([2-9][0-9]|1[5-9]) cached\)' ||
  wait_for 'NEVER: the turn after the drop reused its prefix' 1
pass "a full context drops the oldest turns with a notice"

# /load a saved conversation, then /load another model keeping it.
type_line "/load $WORK/conv.json"
wait_for "\(loaded 5 messages from"
type_line "/load $WORK/no-such-model"
wait_for 'error: .*no-such-model'
type_line '/stats'
wait_for 'conversation 5 messages'
pass "/load restores a conversation; a failed model /load keeps the model"

# Ctrl-D leaves with status 0 and the history is saved for the next chat.
keys C-d
[ "$(wait_exit)" = 0 ] || { echo "FAIL: chat exit status"; exit 1; }
grep -q 'temperature' "$HOME/.local/state/kvad/chat_history"  # libedit's format: spaces as \040
pass "Ctrl-D leaves (exit 0) and the history file is written"

# Typing while a long answer streams: not echoed into it, not sent afterwards. Up recalls the
# previous session's lines (the history file).
rm -f "$WORK/term.rc"
start_term "'$KVAD' chat '$Q3' -n 4000 --ignore-eos --temperature 0 --threads 1"
wait_for 'kvad chat: '
keys Up
wait_for '> /stats$' 5  # the last line of the previous chat
keys C-u
type_line 'go on and on'
sleep 1.5
tm send-keys -t t -l 'TYPEDAHEAD'; keys Enter
sleep 0.5
keys C-c
wait_for '^\[prompt .*cancelled' 30
sleep 0.5
if screen | grep -q TYPEDAHEAD; then echo "FAIL: typed-ahead text was echoed"; screen | tail -20; exit 1; fi
type_line "/save $WORK/conv2.json"
wait_for '\(saved'
python3 - "$WORK/conv2.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["messages"]
assert len(m) == 2 and m[0]["content"] == "go on and on", [x["content"][:40] for x in m]
assert not any("TYPEDAHEAD" in x["content"] for x in m)
PY
pass "text typed while an answer streams is neither shown nor sent"
type_line '/quit'
[ "$(wait_exit)" = 0 ] || { echo "FAIL: /quit exit status"; exit 1; }
