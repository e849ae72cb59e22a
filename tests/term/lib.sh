# Helpers for the terminal tests (sourced): a program in a detached tmux session, keys sent to it
# as a person types them, and the screen read back with capture-pane.
# Expects WORK (a scratch folder). Each test gets its own tmux server (-L), so none sees another's.

TERMS_STARTED=0
TMUX_SOCKET=kvad-term-$$-0
tm() { tmux -L "$TMUX_SOCKET" "$@"; }

start_term() {  # start_term COMMAND...: runs it in a 120x40 terminal; `screen` then shows it
  # A fresh tmux server each time: a new session on the socket of one just killed can reach the
  # dying server ("server exited unexpectedly").
  tm kill-server 2>/dev/null || true
  TERMS_STARTED=$((TERMS_STARTED + 1))
  TMUX_SOCKET=kvad-term-$$-$TERMS_STARTED
  trap 'tm kill-server 2>/dev/null || true' EXIT
  # The command's exit status lands in $WORK/term.rc; the pane stays so its last screen can be read.
  tm new-session -d -s t -x 120 -y 40 "$*; echo \$? > '$WORK/term.rc'; sleep 600"
}

# A line-oriented program's lines as it wrote them: -J joins the rows a long line wrapped onto (a
# deep checkout's paths wrap at 120 columns), sed drops the trailing spaces -J keeps. A full-screen
# program (tests/term/tui.sh) sets SCREEN_JOIN= to read its rows as drawn.
SCREEN_JOIN=-J
screen() { tm capture-pane -t t -p $SCREEN_JOIN -S -2000 | sed 's/[[:space:]]*$//'; }
keys() { tm send-keys -t t "$@"; }
type_line() { tm send-keys -t t -l "$1"; tm send-keys -t t Enter; }

wait_for() {  # wait_for REGEX [SECONDS]: until the screen matches, else fail showing the screen
  local re=$1 secs=${2:-30}
  for _ in $(seq 1 $((secs * 10))); do
    screen | grep -qE -- "$re" && return 0
    sleep 0.1
  done
  echo "FAIL: the screen did not show /$re/ within ${secs}s; it shows:"
  screen | grep -v '^$' | tail -40
  exit 1
}

wait_count() {  # wait_count REGEX N [SECONDS]: until N lines on the screen match
  local re=$1 n=$2 secs=${3:-30}
  for _ in $(seq 1 $((secs * 10))); do
    [ "$(screen | grep -cE -- "$re" || true)" -ge "$n" ] && return 0
    sleep 0.1
  done
  echo "FAIL: fewer than $n lines showed /$re/ within ${secs}s; the screen:"
  screen | grep -v '^$' | tail -40
  exit 1
}

count_of() { screen | grep -cE -- "$1" || true; }  # lines on the screen matching REGEX

wait_exit() {  # wait_exit [SECONDS]: the program ended; prints its exit status
  local secs=${1:-20}
  for _ in $(seq 1 $((secs * 10))); do
    [ -s "$WORK/term.rc" ] && { cat "$WORK/term.rc"; return 0; }
    sleep 0.1
  done
  echo "FAIL: still running ${secs}s later"
  screen | tail -20
  exit 1
}

pass() { echo "ok - $1"; }
