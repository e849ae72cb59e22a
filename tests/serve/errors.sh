#!/usr/bin/env bash
# Every error the API promises, with curl: status, OpenAI's error shape, Retry-After on 429; a client
# that disconnects mid-stream frees the engine; SIGTERM mid-stream ends the stream cleanly, exit 0.
# Run through run.sh (needs KVAD, WORK, MODEL).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
KEY=err-key
passed=0
failed=0

# Pulls go to an empty HF cache, offline: the Models page's pull plumbing runs without a network.
export HF_HOME=$WORK/hf-home HF_HUB_OFFLINE=1
# --parallel 1 --queue 0: one request in flight at most, so the busy case below meets the bound.
start_server errors --api-key $KEY --max-body 1048576 --parallel 1 --queue 0
AUTH=(-H "Authorization: Bearer $KEY")
JSON=(-H "Content-Type: application/json")

# expect NAME STATUS [grep pattern for the body] -- curl args...
expect() {
  local name=$1 want=$2 pattern=$3; shift 4
  local got
  got=$(curl -s -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' "$@" || true)
  if [ "$got" != "$want" ]; then
    echo "FAIL $name: HTTP $got, expected $want: $(head -c 400 "$WORK/body")"; failed=$((failed + 1)); return
  fi
  if [ "$want" -ge 400 ] && ! node -e '
      const b = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
      if (!b.error || typeof b.error.message !== "string" || typeof b.error.type !== "string" || !("param" in b.error) || !("code" in b.error)) process.exit(1);' "$WORK/body"; then
    echo "FAIL $name: not an OpenAI error object: $(head -c 400 "$WORK/body")"; failed=$((failed + 1)); return
  fi
  if [ -n "$pattern" ] && ! grep -qiE "$pattern" "$WORK/body" "$WORK/headers"; then
    echo "FAIL $name: /$pattern/ not in the answer: $(head -c 400 "$WORK/body")"; failed=$((failed + 1)); return
  fi
  echo "ok   $name ($got)"; passed=$((passed + 1))
}

CHAT=$URL/v1/chat/completions
MSG='"messages":[{"role":"user","content":"hi"}]'

expect "malformed JSON" 400 'not valid JSON' -- "${AUTH[@]}" "${JSON[@]}" -d '{"messages": [' "$CHAT"
expect "body not an object" 400 'JSON object' -- "${AUTH[@]}" "${JSON[@]}" -d '[1,2]' "$CHAT"
expect "missing messages" 400 '"param":"messages"' -- "${AUTH[@]}" "${JSON[@]}" -d '{"max_tokens":4}' "$CHAT"
expect "wrong field type" 400 '"param":"temperature"' -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"temperature\":\"hot\"}" "$CHAT"
expect "out of range" 400 '"param":"top_p"' -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"top_p\":3}" "$CHAT"
expect "bad role" 400 'role' -- "${AUTH[@]}" "${JSON[@]}" -d '{"messages":[{"role":"wizard","content":"x"}]}' "$CHAT"
expect "n=2 over --parallel 1 refused" 400 '"param":"n"' -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"n\":2}" "$CHAT"
# Structured outputs: what cannot be compiled is a 400 naming the field, with the compiler's message.
expect "invalid schema" 400 "'maxLength' must be a non-negative integer.*\"param\":\"response_format.json_schema.schema\"" -- "${AUTH[@]}" "${JSON[@]}" \
  -d "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"string\",\"maxLength\":-1}}}}" "$CHAT"
expect "unsupported schema keyword" 400 "keyword 'patternProperties' is not supported \\(at #/properties/a\\)" -- "${AUTH[@]}" "${JSON[@]}" \
  -d "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"patternProperties\":{}}}}}}}" "$CHAT"
expect "GBNF that does not parse" 400 "'grammar': grammar: line 1, column .*\"param\":\"grammar\"" -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"grammar\":\"root ::= (\"}" "$CHAT"
expect "json_schema on completions" 400 '"param":"json_schema"' -- "${AUTH[@]}" "${JSON[@]}" -d '{"prompt":"a","json_schema":{"type":"nope"}}' "$URL/v1/completions"
expect "response_format type unknown" 400 '"param":"response_format.type"' -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"response_format\":{\"type\":\"xml\"}}" "$CHAT"
# Tools: a function without a name, a tool_choice naming none of them, a parameters schema that a
# forced call cannot be held to.
TOOL='{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}'
expect "tool without a name" 400 '"param":"tools\[0\].function.name"' -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"description\":\"x\"}}]}" "$CHAT"
expect "tool_choice names no tool" 400 "'nope', which is not one of the request's tools.*\"param\":\"tool_choice.function.name\"" -- "${AUTH[@]}" "${JSON[@]}" \
  -d "{$MSG,\"tools\":[$TOOL],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}" "$CHAT"
expect "tool parameters that do not compile" 400 "keyword 'patternProperties' is not supported.*\"param\":\"tools\[0\].function.parameters\"" -- "${AUTH[@]}" "${JSON[@]}" \
  -d "{$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"patternProperties\":{}}}}],\"tool_choice\":\"required\"}" "$CHAT"
expect "past call arguments not JSON" 400 '"param":"messages\[1\].tool_calls\[0\].function.arguments"' -- "${AUTH[@]}" "${JSON[@]}" \
  -d '{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}' "$CHAT"
expect "completions without prompt" 400 '"param":"prompt"' -- "${AUTH[@]}" "${JSON[@]}" -d '{"max_tokens":2}' "$URL/v1/completions"
expect "no API key" 401 'invalid_api_key' -- "${JSON[@]}" -d "{$MSG}" "$CHAT"
expect "wrong API key" 401 'Incorrect API key' -- -H "Authorization: Bearer nope" "${JSON[@]}" -d "{$MSG}" "$CHAT"
expect "models need the key" 401 '' -- "$URL/v1/models"
expect "health needs no key" 200 '"status":"ok"' -- "$URL/health"
expect "unknown model" 404 'model_not_found' -- "${AUTH[@]}" "${JSON[@]}" -d "{\"model\":\"no-such-model\",$MSG}" "$CHAT"
expect "unknown model by id" 404 'model_not_found' -- "${AUTH[@]}" "$URL/v1/models/no-such-model"
expect "unknown endpoint" 404 'no such endpoint' -- "${AUTH[@]}" "$URL/v1/nothing"
# The tiny model's context is 4096 tokens: 5000 words are well over it. The error names the limit.
long=$(printf 'word %.0s' $(seq 1 5000))
expect "prompt over the context" 400 '4096 tokens' -- "${AUTH[@]}" "${JSON[@]}" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$long\"}]}" "$CHAT"
head -c 1500000 /dev/zero | tr '\0' 'a' > "$WORK/big"
expect "body over the limit" 413 '1048576 bytes' -- "${AUTH[@]}" "${JSON[@]}" --data-binary @"$WORK/big" "$CHAT"
expect "a good request still works" 200 'chat.completion' -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"max_tokens\":4}" "$CHAT"

# Pull (the Models page): a bad name is refused; a real one runs `kvad pull`, which fails offline
# with its own message, and the page can read it.
expect "pull needs ORG/NAME" 400 'ORG/NAME' -- "${AUTH[@]}" "${JSON[@]}" -d '{"name":"nope"}' "$URL/kvad/models/pull"
expect "pull starts" 200 '"state":"running"' -- "${AUTH[@]}" "${JSON[@]}" -d '{"name":"kvad-test/absent"}' "$URL/kvad/models/pull"
for _ in $(seq 1 100); do
  curl -s "${AUTH[@]}" "$URL/kvad/models/pull" >"$WORK/pull"
  grep -q '"state":"running"' "$WORK/pull" || break
  sleep 0.1
done
if grep -q '"state":"failed"' "$WORK/pull" && grep -qi 'offline\|cache' "$WORK/pull"; then echo "ok   pull reports kvad pull's failure"; passed=$((passed + 1));
else echo "FAIL pull: $(head -c 400 "$WORK/pull")"; failed=$((failed + 1)); fi

# Past the bound (--parallel 1 --queue 0): a long stream holds the only slot; a second request is
# refused at once with 429 + Retry-After.
# The previous answer's sequence may still hold the slot for a step after its response went out
# (--queue 0 refuses rather than waits): start when the engine is idle. ignore_eos: the stream
# must still be running when the next request comes, whatever the random model samples.
for _ in $(seq 1 100); do curl -s "$URL/health" | grep -q '"busy":false' && break; sleep 0.05; done
curl -sN "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"stream\":true,\"max_tokens\":4000,\"temperature\":1,\"seed\":3,\"ignore_eos\":true}" "$CHAT" >"$WORK/long-stream" &
CURL=$!
for _ in $(seq 1 100); do grep -q '"content"' "$WORK/long-stream" 2>/dev/null && break; sleep 0.05; done
t0=$(date +%s%N)
expect "busy" 429 'Retry-After' -- "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"max_tokens\":4}" "$CHAT"
t1=$(date +%s%N)
if [ $(( (t1 - t0) / 1000000 )) -gt 1000 ]; then echo "FAIL busy: the 429 took $(( (t1 - t0) / 1000000 )) ms (must be at once)"; failed=$((failed + 1)); fi
grep -q 'engine_busy' "$WORK/body" || { echo "FAIL busy: code engine_busy missing"; failed=$((failed + 1)); }

# Disconnect: killing the streaming client stops its generation and frees the engine within a second.
kill "$CURL"; wait "$CURL" 2>/dev/null || true
freed=0
for _ in $(seq 1 50); do  # within 5 s (the engine drops it at its next step; 5 s leaves room for a loaded CI machine)
  sleep 0.1
  code=$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"max_tokens\":2}" "$CHAT")
  if [ "$code" = 200 ]; then freed=1; break; fi
done
if [ $freed = 1 ]; then echo "ok   disconnect frees the engine"; passed=$((passed + 1));
else echo "FAIL disconnect: engine still busy 5 s after the client left"; failed=$((failed + 1)); fi
metric=$(curl -s "${AUTH[@]}" "$URL/metrics" | grep '^kvad_client_disconnects_total' || true)
if [[ "$metric" =~ \ [1-9] ]]; then echo "ok   disconnect counted in /metrics"; passed=$((passed + 1));
else echo "FAIL /metrics does not count the disconnect: '$metric'; stream: $(grep -c content "$WORK/long-stream") chunks, $(tail -c 120 "$WORK/long-stream")"; failed=$((failed + 1)); fi

# /metrics is Prometheus text with the promised series.
curl -s "${AUTH[@]}" "$URL/metrics" >"$WORK/metrics"
for m in kvad_requests_total kvad_completion_tokens_total kvad_decode_tokens_per_second kvad_queue_depth \
         kvad_kv_cache_bytes kvad_resident_memory_bytes kvad_busy_rejections_total; do
  grep -q "^$m" "$WORK/metrics" || { echo "FAIL /metrics lacks $m"; failed=$((failed + 1)); continue; }
done
grep -q 'kvad_requests_total{endpoint="/v1/chat/completions",status="429"}' "$WORK/metrics" \
  && { echo "ok   /metrics series"; passed=$((passed + 1)); } || { echo "FAIL /metrics: 429 not counted"; failed=$((failed + 1)); }

# A second server on the same port is an error (exit 1), not a listener sharing its clients.
set +e
"$KVAD" serve --model "$MODEL" --port "$PORT" --threads 1 >"$WORK/second.out" 2>"$WORK/second.err" &
SECOND=$!
for _ in $(seq 1 100); do kill -0 $SECOND 2>/dev/null || break; sleep 0.1; done
if kill -0 $SECOND 2>/dev/null; then kill -9 $SECOND; echo "FAIL second server on port $PORT is running"; failed=$((failed + 1));
else
  wait $SECOND; rc=$?
  if [ $rc = 1 ] && grep -q "port $PORT is already in use" "$WORK/second.err"; then echo "ok   a port in use: exit 1, said so"; passed=$((passed + 1));
  else echo "FAIL port in use: exit $rc, $(cat "$WORK/second.err")"; failed=$((failed + 1)); fi
fi
set -e

# No --model: the default model is loaded, as `kvad run` uses it; --no-model starts empty.
# The default run logs at --verbose (every request, polling too, with the client); the empty one
# at --quiet (no request lines, no summaries).
for mode in default empty; do
  flag=--verbose; [ $mode = empty ] && flag="--no-model --quiet"
  # 2 threads: the compute pool's worker must not take SIGTERM's default action (exit 143).
  "$KVAD" serve --port 0 --threads 2 $flag 2>"$WORK/default-$mode.err" &
  D=$!
  DPORT=
  for _ in $(seq 1 300); do
    DPORT=$(port_in_log "$WORK/default-$mode.err")
    [ -n "$DPORT" ] && break; sleep 0.1
  done
  # A failed read is a FAIL line below, never an exit that would leave this server running (and
  # holding ctest's output pipe open).
  ids=$(curl -s --retry 5 --retry-connrefused --retry-delay 1 "http://127.0.0.1:$DPORT/v1/models" |
        node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).data.map(m=>m.id).join(",")))' 2>/dev/null) ||
    ids="(no answer on port $DPORT: $(tail -2 "$WORK/default-$mode.err" | tr '\n' ' '))"
  kill -TERM $D; rc=0; wait $D || rc=$?
  want=kvad-kjv; [ $mode = empty ] && want=
  if [ "$ids" = "$want" ]; then echo "ok   serve without --model ($mode): models [$ids]"; passed=$((passed + 1));
  else echo "FAIL serve without --model ($mode): models [$ids], expected [$want]"; failed=$((failed + 1)); fi
  summaries=$(grep -c "stopped after\|| context " "$WORK/default-$mode.err" || true)
  requests=$(grep -c "GET /v1/models 200 | [0-9]* ms | from 127.0.0.1" "$WORK/default-$mode.err" || true)
  want_lines=2; [ $mode = empty ] && want_lines=0
  if [ $rc = 0 ] && [ "$summaries" = $want_lines ] && [ "$requests" = $((want_lines / 2)) ]; then
    echo "ok   SIGTERM with a 2-thread pool: exit 0; $flag logs $summaries summaries, $requests request lines"; passed=$((passed + 1));
  else echo "FAIL SIGTERM ($mode, $flag): exit $rc, $summaries summaries, $requests request lines: $(tail -4 "$WORK/default-$mode.err")"; failed=$((failed + 1)); fi
done

# The request log at the default level: a generation's line has its tokens, time and speed; an
# error's line its status; polling is not logged.
if grep -qE "POST /v1/chat/completions 200 \| prompt [0-9]+ tokens \([0-9]+ cached\), [1-9][0-9]* generated \| [0-9]+ ms \| [0-9.]+ tok/s" "$LOG" &&
   grep -qE "POST /v1/chat/completions 4[0-9][0-9] \| [0-9]+ ms" "$LOG" && ! grep -q "GET /health" "$LOG"; then
  echo "ok   one log line per request: tokens, ms, tok/s; errors with their status"; passed=$((passed + 1))
else echo "FAIL request log: $(grep 'kvad serve: [A-Z]* /' "$LOG" | head -5)"; failed=$((failed + 1)); fi

# SIGTERM mid-stream: the stream ends cleanly ([DONE]) and the server exits 0.
curl -sN "${AUTH[@]}" "${JSON[@]}" -d "{$MSG,\"stream\":true,\"max_tokens\":4000,\"seed\":5}" "$CHAT" >"$WORK/term-stream" &
CURL=$!
for _ in $(seq 1 100); do grep -q '"content"' "$WORK/term-stream" 2>/dev/null && break; sleep 0.05; done
stop_server
wait "$CURL" || true
if tail -c 200 "$WORK/term-stream" | grep -q 'data: \[DONE\]'; then echo "ok   SIGTERM ends the stream with [DONE], exit 0"; passed=$((passed + 1));
else echo "FAIL SIGTERM: stream did not end cleanly: $(tail -c 300 "$WORK/term-stream")"; failed=$((failed + 1)); fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
