#!/usr/bin/env bash
# Builds kvad and runs every test: once in release mode, once under AddressSanitizer + UBSan.
#   scripts/test.sh            # both
#   KVAD_SKIP_ASAN=1 scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

echo "== release build + tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS"

if [ -z "${KVAD_SKIP_ASAN:-}" ]; then
  echo "== AddressSanitizer + UBSan build + tests"
  # -g1: line tables only (file:line in sanitizer reports); full -g made each file ~25% slower to compile.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DKVAD_SANITIZE=ON >/dev/null
  cmake --build build-asan -j "$JOBS"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$JOBS"
fi
echo "== all tests passed"
