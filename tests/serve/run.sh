#!/usr/bin/env bash
# Drives `kvad serve` as its users do. CTest runs each KIND (see CMakeLists.txt):
#   tests/serve/run.sh setup    KVAD WORK   # npm ci (openai, playwright-core) + a tiny synthesized model
#   tests/serve/run.sh api      KVAD WORK   # the official openai npm client: chat, streaming, completions, models;
#                                           # the ollama npm client on Ollama's API, llama-server's endpoints
#   tests/serve/run.sh errors   KVAD WORK   # curl: every error status, disconnect, SIGTERM mid-stream
#   tests/serve/run.sh ui       KVAD WORK   # headless Chromium: every page as a user uses it, the chat's features (+ one screenshot a page)
#   tests/serve/run.sh load     KVAD WORK   # 16 concurrent clients for 60 s (loopback): all answered, memory flat
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
    start_server ui --ctx 512 --models-dir "$WORK"
    rm -rf "$WORK/screenshots"
    # One file at a time: each drives one browser against the one server.
    KVAD_URL=$URL SHOTS=$WORK/screenshots node --test --test-concurrency=1 "$HERE/ui-chat.test.mjs" "$HERE/ui.test.mjs" "$HERE/ui-train-lora.test.mjs"
    stop_server
    ;;
  load)
    need node
    start_server load --max-body 1048576
    KVAD_URL=$URL node "$HERE/load.mjs" "${LOAD_CLIENTS:-16}" "${LOAD_SECONDS:-60}"
    stop_server
    ;;
  *) echo "unknown test kind $KIND"; exit 2 ;;
esac
