#!/usr/bin/env bash
# Installs what kvad needs to build and test, from Debian/Ubuntu packages only. Idempotent: only
# missing packages are installed (apt-get update runs only when something is missing).
#   scripts/install-deps.sh          # build + test dependencies
#   scripts/install-deps.sh --run    # only what building the kvad binary needs (README's first command)
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config g++  # the compiler and build tools
  nlohmann-json3-dev           # JSON: config.json, tokenizer.json, safetensors headers
  libfmt-dev                   # error messages and number formatting (std::format is not in GCC 12)
  libcli11-dev                 # command-line parsing for every subcommand
  libpcre2-dev                 # Unicode regexes of the BPE pre-tokenizers (\p{L}, lookahead)
  libutf8proc-dev              # Unicode NFC normalisation (Qwen's tokenizer)
  zlib1g-dev                   # inflating the tokenizer fixtures compiled into the binary
  python3                      # tools/ scripts (not needed by the tests)
  libcurl4-openssl-dev         # the Hub client (kvad pull): HTTPS, redirects, Range resume, timeouts
  libssl-dev                   # libcrypto: sha256 / git sha1 checks of every downloaded file
  libcpp-httplib-dev           # kvad serve: HTTP server (thread pool, chunked streaming, body size limit)
  libedit-dev                  # kvad chat: line editing and history (BSD licence; readline is GPL-3)
  libncurses-dev               # kvad tui: the full-screen terminal UI (ncursesw)
  libpng-dev                   # kvad images: the PNG files it writes (with the generation parameters)
  libvulkan-dev glslc          # --device gpu: Vulkan headers, and GLSL -> SPIR-V for the shaders (libvulkan is dlopen'ed)
  libopenmpi-dev openmpi-bin   # kvad train under mpirun: data-parallel gradient allreduce (OpenMPI)
  libjs-marked                 # web UI: Markdown of chat answers (embedded in the binary)
  node-dompurify               # web UI: sanitises that Markdown's HTML so model output never runs (embedded)
)
TEST_PKGS=(
  clang lld libclang-rt-14-dev # libFuzzer and the sanitizer build
  libgtest-dev                 # GoogleTest: the test suite
  tmux                         # tests: kvad chat in a real terminal (send-keys, capture-pane)
  mesa-vulkan-drivers          # tests: lavapipe, Mesa's CPU Vulkan driver, runs the GPU backend's tests
  chromium                     # tests: the web UI in headless Chromium (driven by npm's playwright-core)
  curl                         # tests: every error case of the server's API
  python3-jsonschema           # tests: an independent validator of grammar-constrained JSON
  nginx libnginx-mod-http-js   # kvad cluster's front end (consistent hashing; njs reads the routing key)
)
if [ "${1:-}" != --run ]; then
  PKGS+=("${TEST_PKGS[@]}")
  # Node.js + npm for the server's client tests (the official openai npm client, playwright-core).
  # A Node.js installed another way (nodesource's bundles npm) is used as it is.
  command -v node >/dev/null || PKGS+=(nodejs)
  command -v npm >/dev/null || PKGS+=(npm)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
