#!/usr/bin/env bash
# Assembles .gpu/ (ignored by git; carried to a lent GPU machine by the device tool, which sends
# the working tree and the paths named in `carry`): everything bench/gpu/device.sh runs there,
# since that machine reaches no network and has no glslc, no Vulkan loader and no npm.
#   - kvad and the runtime's test binary (its Gpu* suites are the backend's tests) from build/ (release), with the shared libraries they need
#     beyond glibc and libstdc++;
#   - llama.cpp's own llama-batched-bench (../shared/peer/build-llamacpp: the v0.5.0 source the peer
#     binding ships) with the binding's prebuilt Vulkan backend, libggml-vulkan.so, beside it
#     (npm @node-llama-cpp/linux-x64-vulkan, the same release): ggml loads it at run time;
#   - Debian's Vulkan loader (libvulkan1) as a .deb to unpack there (docs of the device tool);
#   - the peer's GGUF converter (../shared/peer/to_gguf.py: needs numpy, which is there).
# All of it compressed into one bundle under the tool's 64 MiB. Run from anywhere; ~10 min the
# first time (llama.cpp's build), seconds after.
#   bench/gpu/prepare.sh && bench/gpu/slim-tree.sh on
#   run(carry=[".gpu/bundle.tar.xz"], timeout_s=540, command="bash bench/gpu/device.sh"); bench/gpu/slim-tree.sh off
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PEER=$ROOT/../shared/peer
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude

# kvad, built here with its shaders (glslc is here, not there).
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVAD_TESTS=ON -DKVAD_UNIT_TESTS=ON >/dev/null
fi
ninja -C build kvad test_runtime >/dev/null
mkdir -p "$STAGE/bin" "$STAGE/lib"
for b in kvad test_runtime; do strip -o "$STAGE/bin/$b" "build/$b"; done
# Libraries beyond the C and C++ runtimes (those are on any Linux with a newer or equal glibc).
for b in "$STAGE"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
    *) cp -L "$lib" "$STAGE/lib/" ;;
  esac
done

# llama.cpp with its Vulkan backend.
B=$("$PEER/build-llamacpp")
mkdir -p "$STAGE/llama"
cp -a "$B"/llama-batched-bench "$B"/*.so* "$STAGE/llama/"
if [ ! -f "$ROOT/.gpu/cache/libggml-vulkan.so" ]; then
  mkdir -p "$ROOT/.gpu/cache"
  # Unpacked in a folder of its own: the 24 MB package must not end up in the bundle.
  pack=$(mktemp -d)
  (cd "$pack" && npm pack --silent @node-llama-cpp/linux-x64-vulkan@3.22.1 >/dev/null &&
    tar xzf node-llama-cpp-linux-x64-vulkan-*.tgz package/bins/linux-x64-vulkan/libggml-vulkan.so &&
    mv package/bins/linux-x64-vulkan/libggml-vulkan.so "$ROOT/.gpu/cache/")
  rm -rf "$pack"
fi
cp "$ROOT/.gpu/cache/libggml-vulkan.so" "$STAGE/llama/"

# The fixtures the GPU tests read (the tiny models' tokenizers), so the tree that travels can be
# bench/gpu/device.sh alone (bench/gpu/slim-tree.sh: the whole checkout is over the tool's 64 MiB).
for t in qwen3 llama3; do
  mkdir -p "$STAGE/src/tests/fixtures/tokenizers/$t"
  cp tests/fixtures/tokenizers/$t/tokenizer*.json "$STAGE/src/tests/fixtures/tokenizers/$t/"
done

# The Vulkan loader, and the converter.
mkdir -p "$STAGE/debs"
(cd "$STAGE/debs" && apt-get download libvulkan1 >/dev/null)
cp "$PEER/to_gguf.py" "$STAGE/"

tar -C "$STAGE" -cJf "$ROOT/.gpu/bundle.tar.xz" .
echo "$ROOT/.gpu/bundle.tar.xz: $(du -h "$ROOT/.gpu/bundle.tar.xz" | cut -f1) (kvad $(git -C "$ROOT" rev-parse --short HEAD))"
