#!/usr/bin/env bash
# The prefix-cache hit rate of `kvad cluster` with prefix-affinity routing against round-robin, on
# multi-turn conversations (`kvad bench serve --conversations`), the two routings interleaved.
#   bench/cluster_affinity.sh KVAD MODEL [REPLICAS] [CONVERSATIONS] [TURNS] [REPEATS]
# "one replica" is the ceiling: one server that sees every turn of every conversation.
# Prints one line per run and the mean per routing. docs/scale-out.md has the figures.
set -euo pipefail
KVAD=$(realpath "$1"); MODEL=$2; N=${3:-3}; CONV=${4:-16}; TURNS=${5:-4}; REPEATS=${6:-2}
PORT=${PORT:-18180}
DIR=$(mktemp -d)
trap 'pkill -TERM -f "kvad cluster .*--dir $DIR" 2>/dev/null || true; sleep 2; rm -rf "$DIR"' EXIT
printf "%-12s %6s %10s %10s %8s %9s\n" routing run prompt_tok cached hit_% seconds
for r in $(seq 1 "$REPEATS"); do
  for routing in affinity round-robin one-replica; do
    n=$N; how=$routing
    [ "$routing" = one-replica ] && n=1 how=affinity
    "$KVAD" cluster -n "$n" --routing "$how" --model "$MODEL" --port "$PORT" --threads 1 --dir "$DIR/$routing-$r" \
      -- --parallel 4 >"$DIR/$routing-$r.out" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do grep -q "behind nginx" "$DIR/$routing-$r.out" && break; sleep 0.1; done
    "$KVAD" bench serve --url "http://127.0.0.1:$PORT" --conversations "$CONV" --turns "$TURNS" --concurrency 4 \
      --input-len 64 --output-len 32 --token-range 1000 --seed "$r" --json >"$DIR/$routing-$r.json"
    kill -TERM "$pid"; wait "$pid" || true
    python3 - "$routing" "$r" "$DIR/$routing-$r.json" <<'PY'
import json, sys
j = json.loads(open(sys.argv[3]).read().splitlines()[0])
assert j["failed"] == 0, j["first_error"]
print(f'{sys.argv[1]:<12} {sys.argv[2]:>6} {j["total_input_tokens"]:>10} {j["cached_input_tokens"]:>10} {100*j["prefix_cache_hit_rate"]:>8.1f} {j["duration"]:>9.2f}')
PY
  done
done | tee "$DIR/table"
python3 - "$DIR/table" <<'PY'
import sys, collections
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    rates[f[0]].append(float(f[4]))
for k, v in rates.items(): print(f"mean {k:<12} hit rate {sum(v)/len(v):.1f}% over {len(v)} runs")
PY
