# Helpers for the serve tests (sourced): start a kvad server on a free port, stop it with SIGTERM.
# Expects KVAD (the binary), WORK (a scratch folder) and MODEL (a model folder).

port_in_log() {  # port_in_log LOG: the port a server's "listening on" line names (empty until then)
  sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\)\/.*/\1/p' "$1" | head -1
}

start_server() {  # start_server NAME [kvad serve flags...]; sets PID, PORT, URL, LOG
  local name=$1; shift
  LOG=$WORK/$name.server.log
  : > "$LOG"  # before the server's own redirection opens it: the first poll below must find the file
  "$KVAD" serve --model "$MODEL" --port 0 --threads 1 "$@" 2>"$LOG" &
  PID=$!
  trap 'kill -9 $PID 2>/dev/null || true' EXIT  # a failing test never leaves a server behind
  for _ in $(seq 1 300); do
    PORT=$(port_in_log "$LOG")
    [ -n "$PORT" ] && break
    if ! kill -0 "$PID" 2>/dev/null; then echo "server died at start:"; cat "$LOG"; exit 1; fi
    sleep 0.1
  done
  [ -n "$PORT" ] || { echo "server did not start in 30 s"; cat "$LOG"; kill -9 "$PID"; exit 1; }
  URL=http://127.0.0.1:$PORT
  export URL PORT
}

stop_server() {  # SIGTERM, then the exit status must be 0 within 20 s
  kill -TERM "$PID"
  local rc=0
  for _ in $(seq 1 200); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$PID" 2>/dev/null; then echo "FAIL: server still running 20 s after SIGTERM"; kill -9 "$PID"; cat "$LOG"; exit 1; fi
  wait "$PID" || rc=$?
  trap - EXIT
  if [ "$rc" != 0 ]; then echo "FAIL: server exited $rc after SIGTERM"; tail -20 "$LOG"; exit 1; fi
}
