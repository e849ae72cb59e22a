#!/usr/bin/env bash
# Drives `kvad serve` as its users do. CTest runs each KIND (see CMakeLists.txt):
#   tests/serve/run.sh setup    KVAD WORK   # npm ci (openai, playwright-core) + a tiny synthesized model
#   tests/serve/run.sh api      KVAD WORK   # the official openai npm client: chat, streaming, completions, models, images;
#                                           # the ollama npm client on Ollama's API, llama-server's endpoints
#   tests/serve/run.sh errors   KVAD WORK   # curl: every error status, disconnect, SIGTERM mid-stream
#   tests/serve/run.sh ui       KVAD WORK   # headless Chromium: every page as a user uses it, the chat's features (+ one screenshot a page)
#   tests/serve/run.sh load     KVAD WORK   # 16 concurrent clients for 60 s (loopback): all answered, memory flat
#   tests/serve/run.sh cluster  KVAD WORK   # kvad cluster: 3 replicas behind nginx, affinity, a killed replica
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
KIND=$1
KVAD=$(realpath "$2")
WORK=$3
MODEL=$WORK/tiny-qwen2
mkdir -p "$WORK"
export KVAD WORK MODEL
export KVAD_HOME=$WORK/home-$KIND  # models trained by the tests land here, not in the user's store
rm -rf "$KVAD_HOME"
source "$HERE/lib.sh"

need() { command -v "$1" >/dev/null || { echo "FAIL: $1 is not installed (scripts/install-deps.sh installs it)"; exit 1; }; }

case "$KIND" in
  setup)
    need node; need npm; need curl
    # npm ci only when package-lock.json changed since the last install.
    stamp=$HERE/node_modules/.kvad-lock
    if ! cmp -s "$HERE/package-lock.json" "$stamp"; then
      (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
      cp "$HERE/package-lock.json" "$stamp"
    fi
    rm -rf "$MODEL"
    "$KVAD" synth --arch qwen2 --preset tiny --out "$MODEL" >/dev/null
    echo "setup: node $(node --version), model in $MODEL"
    ;;
  api)
    need node
    start_server api --api-key test-key
    KVAD_URL=$URL KVAD_KEY=test-key node --test "$HERE/api.test.mjs"
    stop_server
    # Ollama's clients hard-code a model name: --alias serves the tiny model as one.
    start_server ollama --api-key test-key --alias llama3.2 --parallel 2 --models-dir "$WORK"
    KVAD_URL=$URL KVAD_KEY=test-key node --test "$HERE/ollama.test.mjs"
    stop_server
    # Images beside the language model (the tiny SD 1.5 pipeline of tests/fixtures/peer-image).
    # --memory 1GiB: 128x128 paints, 2048x2048 (~3.4 GB of working memory) is refused (images.test.mjs).
    start_server images --api-key test-key --memory 1GiB --image-model "$HERE/../fixtures/peer-image/models/sd15-tiny"
    KVAD_URL=$URL KVAD_KEY=test-key node --test "$HERE/images.test.mjs"
    stop_server
    # A budget too small for what is loaded is said at start, with each part's size.
    if "$KVAD" serve --model "$MODEL" --port 0 --memory 20MiB --image-model "$HERE/../fixtures/peer-image/models/sd15-tiny" \
        >"$WORK/budget.out" 2>"$WORK/budget.err"; then
      echo "FAIL: kvad serve started with --memory 20MiB"; exit 1
    fi
    grep -q -- "--memory 21.0 MB: the language model needs" "$WORK/budget.err" ||
      { echo "FAIL: the start-up budget error does not say what needs what:"; cat "$WORK/budget.err"; exit 1; }
    ;;
  errors)
    need curl
    bash "$HERE/errors.sh"
    ;;
  ui)
    need node
    [ -x /usr/bin/chromium ] || { echo "FAIL: /usr/bin/chromium is not installed (scripts/install-deps.sh)"; exit 1; }
    # --ctx 512: an answer can fill the context in a few seconds (the UI must say so). --models-dir:
    # the test model stays listed (and loadable again) after the tests load another one.
    start_server ui --ctx 512 --models-dir "$WORK" --image-model "$HERE/../fixtures/peer-image/models/sd15-tiny"
    rm -rf "$WORK/screenshots"
    # One file at a time: each drives one browser against the one server.
    KVAD_URL=$URL SHOTS=$WORK/screenshots node --test --test-concurrency=1 "$HERE/ui-chat.test.mjs" "$HERE/ui.test.mjs" "$HERE/ui-train-lora.test.mjs" "$HERE/ui-images.test.mjs"
    stop_server
    ;;
  load)
    need node
    start_server load --max-body 1048576
    KVAD_URL=$URL node "$HERE/load.mjs" "${LOAD_CLIENTS:-16}" "${LOAD_SECONDS:-60}"
    stop_server
    ;;
  cluster)
    need node; need nginx
    [ -f /usr/lib/nginx/modules/ngx_http_js_module.so ] || { echo "FAIL: libnginx-mod-http-js is not installed (scripts/install-deps.sh)"; exit 1; }
    DIR=$WORK/cluster
    rm -rf "$DIR"
    # A free port with two free ones after it (nginx + 3 replicas).
    BASE=$(python3 -c 'import socket,random
for _ in range(200):
    p = random.randrange(20000, 60000, 4); ok = True
    for q in range(p, p + 4):
        s = socket.socket()
        try: s.bind(("127.0.0.1", q))
        except OSError: ok = False
        s.close()
    if ok: print(p); break')
    "$KVAD" cluster -n 3 --model "$MODEL" --port "$BASE" --threads 1 --dir "$DIR" -- --parallel 2 >"$WORK/cluster.out" 2>"$WORK/cluster.err" &
    PID=$!
    trap 'kill -TERM $PID 2>/dev/null; sleep 2; kill -9 $PID 2>/dev/null || true' EXIT
    for _ in $(seq 1 600); do
      grep -q "behind nginx" "$WORK/cluster.out" 2>/dev/null && break
      if ! kill -0 "$PID" 2>/dev/null; then echo "FAIL: kvad cluster died at start:"; cat "$WORK/cluster.err"; exit 1; fi
      sleep 0.1
    done
    grep -q "behind nginx" "$WORK/cluster.out" || { echo "FAIL: kvad cluster did not start in 60 s"; cat "$WORK/cluster.err"; exit 1; }
    pids=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(" ".join(str(r["pid"]) for r in j["replicas"]), j["nginx"]["pid"])' "$DIR/cluster.json")
    KVAD_URL=http://127.0.0.1:$BASE CLUSTER_JSON=$DIR/cluster.json node --test "$HERE/cluster.test.mjs" || { tail -5 "$DIR"/*.log; exit 1; }
    for _ in $(seq 1 20); do grep -q "was killed by signal 9" "$WORK/cluster.err" && break; sleep 0.1; done
    grep -q "was killed by signal 9" "$WORK/cluster.err" || { echo "FAIL: kvad cluster did not report the killed replica"; cat "$WORK/cluster.err"; exit 1; }
    kill -TERM "$PID"
    rc=0; wait "$PID" || rc=$?
    trap - EXIT
    [ "$rc" = 0 ] || { echo "FAIL: kvad cluster exited $rc after SIGTERM"; cat "$WORK/cluster.err"; exit 1; }
    for p in $pids; do
      if kill -0 "$p" 2>/dev/null; then echo "FAIL: process $p outlived kvad cluster"; exit 1; fi
    done
    # --write-config: the configuration for replicas on other machines, as nginx itself reads it.
    "$KVAD" cluster --write-config --upstream 10.0.0.11:8080 --upstream 10.0.0.12:8080 --port "$BASE" --dir "$DIR/remote" >/dev/null
    nginx -t -p "$DIR/remote" -c "$DIR/remote/nginx.conf" -e "$DIR/remote/nginx-error.log" 2>"$WORK/nginx-t.log" \
      || { echo "FAIL: nginx -t refused the written configuration"; cat "$WORK/nginx-t.log"; exit 1; }
    grep -q "server 10.0.0.12:8080" "$DIR/remote/nginx.conf" || { echo "FAIL: --upstream not in nginx.conf"; exit 1; }
    if "$KVAD" cluster --upstream 10.0.0.11:8080 --dir "$DIR/bad" 2>"$WORK/bad.err"; then echo "FAIL: --upstream without --write-config accepted"; exit 1; fi
    grep -q "write-config" "$WORK/bad.err" || { echo "FAIL: unclear error:"; cat "$WORK/bad.err"; exit 1; }
    echo "cluster: ok"
    ;;
  *) echo "unknown test kind $KIND"; exit 2 ;;
esac
