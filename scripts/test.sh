#!/usr/bin/env bash
# Builds kvad and runs every test: the release binary end to end, and the whole suite under
# AddressSanitizer + UBSan.
#   scripts/test.sh                    # both (CI)
#   KVAD_SKIP_ASAN=1 scripts/test.sh   # release only, with the GoogleTest suite there instead
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
# The GPU backend's tests run on lavapipe (mesa-vulkan-drivers): here a missing device is a failure,
# not a skip (tests/support/gpu_device.h).
export KVAD_REQUIRE_VULKAN=1

# Where each test runs (docs/build.md has the times that decided it):
#   release pass: the binary users run, driven end to end (the openai npm client, curl on every
#     error, headless Chromium on the web UI, the 16-client load test);
#   sanitizer pass: the whole GoogleTest suite (every unit, model, kernel, CLI and server test)
#     under ASan + UBSan, compute layers at -O2 as in release, but for the few whose substance is
#     volume (KVAD_RELEASE_PASS_TESTS in CMakeLists.txt: sampled-output properties, throughput,
#     quantisation statistics), which the release pass builds and runs instead.
# KVAD_RELEASE_UNIT_TESTS=1 also builds and runs the GoogleTest suite in the release pass.
echo "== release build + end-to-end tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVAD_TESTS=ON -DKVAD_UNIT_TESTS=$([ -n "${KVAD_RELEASE_UNIT_TESTS:-}${KVAD_SKIP_ASAN:-}" ] && echo ON || echo OFF) >/dev/null
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS"

if [ -z "${KVAD_SKIP_ASAN:-}" ]; then
  echo "== AddressSanitizer + UBSan build + tests"
  # -g1: line tables only (file:line in sanitizer reports); full -g made each file ~25% slower to compile.
  # -O1: ASan's recommended level, and 2.4x faster to compile than -O2 on the JSON-heavy files
  # (CMakeLists.txt keeps the compute layers at -O2). docs/build.md has the figures.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DKVAD_SANITIZE=ON -DKVAD_TESTS=ON >/dev/null
  cmake --build build-asan -j "$JOBS"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS"
fi
echo "== all tests passed"
