#!/bin/bash
# Runs a command at autogroup nice -20 (needs root), like ../shared/peer/measure's BOOST=1, so that
# a busy neighbour on a small machine does not derail the spin-waiting threads of kvad or
# llama.cpp. Start it with setsid so only this command's group is boosted:
#   setsid bench/boost.sh build/kvad bench --model M --quant q8
echo -20 >/proc/self/autogroup 2>/dev/null || echo "boost.sh: cannot set autogroup nice (not root?)" >&2
renice -n -20 $$ >/dev/null 2>&1
exec "$@"
