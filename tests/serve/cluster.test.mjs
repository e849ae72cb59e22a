// `kvad cluster`: three kvad serve replicas behind nginx, driven with the official openai client.
// A conversation's turns must land on one replica (its cached_tokens prove the KV blocks were
// there), a killed replica's conversations must move and keep being answered, and only the
// request in flight on the killed replica may fail -- cleanly, not by hanging.
// Needs KVAD_URL (nginx) and CLUSTER_JSON (the state file kvad cluster writes); run.sh starts them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.env.KVAD_URL + '/v1', apiKey: 'none', maxRetries: 0, timeout: 60000 });
const cluster = JSON.parse(readFileSync(process.env.CLUSTER_JSON, 'utf8'));
let model;

// Long enough system prompts that the first turn fills whole KV blocks (only whole blocks are reused).
const topics = ['rivers', 'mountains', 'owls', 'copper', 'tides', 'violins', 'glaciers', 'lanterns'];
const conversations = topics.map((t, i) => ({
  topic: t,
  messages: [
    { role: 'system', content: `Conversation ${i}. You answer questions about ${t}. ` + `Keep every answer about ${t} short and plain. `.repeat(6) },
    { role: 'user', content: `Tell me one thing about ${t}.` },
  ],
  replicas: [],
  cached: [],
}));

async function turn(conv, extra = {}) {
  const { data, response } = await client.chat.completions
    .create({ model, messages: conv.messages, max_tokens: 6, temperature: 0, ...extra })
    .withResponse();
  const replica = response.headers.get('x-kvad-replica');
  assert.match(replica, /^[123]$/, 'nginx names the replica that answered');
  conv.replicas.push(replica);
  conv.cached.push(data.usage.prompt_tokens_details.cached_tokens);
  conv.messages.push({ role: 'assistant', content: data.choices[0].message.content });
  conv.messages.push({ role: 'user', content: `And another thing about ${conv.topic}? (${conv.replicas.length})` });
  return { replica, cached: data.usage.prompt_tokens_details.cached_tokens, prompt: data.usage.prompt_tokens };
}

const last = (a) => a[a.length - 1];

test('every replica serves the model', async () => {
  const list = await client.models.list();
  model = list.data[0].id;
  assert.equal(cluster.replicas.length, 3);
});

test("a conversation's turns land on one replica, which reuses its cached prefix", async () => {
  for (let t = 0; t < 3; t++) await Promise.all(conversations.map((c) => turn(c)));
  for (const c of conversations) {
    assert.equal(new Set(c.replicas).size, 1, `${c.topic}: turns went to replicas ${c.replicas}`);
    assert.equal(c.cached[0], 0, `${c.topic}: the first turn has nothing cached`);
    assert.ok(c.cached[1] > 0 && c.cached[2] > c.cached[1], `${c.topic}: cached_tokens ${c.cached} grow turn by turn`);
  }
  const used = new Set(conversations.map((c) => c.replicas[0]));
  assert.ok(used.size >= 2, `8 conversations spread over the replicas (used: ${[...used]})`);
});

test('X-Session-Id keeps requests with different first turns together', async () => {
  const seen = new Set();
  for (let i = 0; i < 4; i++) {
    const { response } = await client.chat.completions
      .create({ model, messages: [{ role: 'user', content: `unrelated question ${i}` }], max_tokens: 2 },
              { headers: { 'X-Session-Id': 'session-42' } })
      .withResponse();
    seen.add(response.headers.get('x-kvad-replica'));
  }
  assert.equal(seen.size, 1, `one session, one replica (got ${[...seen]})`);
});

test('requests with no routing key go to the least-loaded replica, not always the same one', async () => {
  const seen = new Set();
  for (let i = 0; i < 6; i++) {
    const r = await fetch(process.env.KVAD_URL + '/v1/models');
    assert.equal(r.status, 200);
    seen.add(r.headers.get('x-kvad-replica'));
  }
  assert.ok(seen.size >= 2, `keyless requests spread (got ${[...seen]})`);
});

test('a hostile body reaches a replica and gets its 4xx; nginx stays up', async () => {
  const deep = '{"messages":' + '['.repeat(20000) + ']'.repeat(20000) + '}';
  const r = await fetch(process.env.KVAD_URL + '/v1/chat/completions', { method: 'POST', body: deep,
    headers: { 'content-type': 'application/json' } });
  assert.ok(r.status >= 400 && r.status < 500, `status ${r.status}`);
  const ok = await fetch(process.env.KVAD_URL + '/health');
  assert.equal(ok.status, 200);
});

test("behind nginx each client's cached prefixes stay its own, and X-Forwarded-For cannot be forged", async () => {
  const messages = [{ role: 'system', content: 'Private preamble of one client. '.repeat(12) }, { role: 'user', content: 'hello' }];
  const body = JSON.stringify({ model, messages, max_tokens: 2, temperature: 0 });
  const post = async (url, headers = {}) => {
    const r = await fetch(url + '/v1/chat/completions', { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
    assert.equal(r.status, 200);
    return { replica: r.headers.get('x-kvad-replica'), cached: (await r.json()).usage.prompt_tokens_details.cached_tokens };
  };
  const first = await post(process.env.KVAD_URL);  // through nginx: cached for client 127.0.0.1
  assert.equal(first.cached, 0);
  const direct = `http://127.0.0.1:${cluster.replicas[Number(first.replica) - 1].port}`;
  // Straight to that replica as nginx would send another client's request: not 127.0.0.1's cache.
  assert.equal((await post(direct, { 'X-Forwarded-For': '10.0.0.7' })).cached, 0, 'another client sees no cached prefix');
  assert.ok((await post(direct, { 'X-Forwarded-For': '10.0.0.7' })).cached > 0, 'that client reuses its own');
  // A client claiming to be 10.0.0.8 through nginx is still 127.0.0.1 (nginx appends the real address).
  const forged = await post(process.env.KVAD_URL, { 'X-Forwarded-For': '10.0.0.8' });
  assert.equal(forged.replica, first.replica);
  assert.ok(forged.cached > 0, 'the forged header did not change who the client is');
});

test("a killed replica: its stream fails cleanly, its conversations move, the others stay", async () => {
  const victim = conversations[0];
  const dead = victim.replicas[0];
  const pid = cluster.replicas[Number(dead) - 1].pid;
  const before = Object.fromEntries(conversations.map((c) => [c.topic, c.replicas[0]]));

  // A long answer streaming from the victim's replica, cut by SIGKILL after its first token.
  const stream = await client.chat.completions.create({ model, messages: victim.messages, max_tokens: 4000,
    temperature: 1, seed: 3, ignore_eos: true, stream: true });
  let finish = null, chunks = 0, failed = null;
  const started = Date.now();
  try {
    for await (const chunk of stream) {
      if (chunks++ === 1) process.kill(pid, 'SIGKILL');
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    }
  } catch (e) {
    failed = e;
  }
  assert.ok(chunks >= 2, 'the stream had started');
  assert.ok(failed || finish === null, 'the cut stream is not reported as a finished answer');
  assert.ok(Date.now() - started < 30000, 'the client learned of the failure promptly');

  // Every conversation's next turn, all at once right after the kill: none may be lost.
  const next = await Promise.allSettled(conversations.map((c) => turn(c)));
  next.forEach((r, i) => assert.equal(r.status, 'fulfilled', `${conversations[i].topic}: ${r.reason}`));
  for (const c of conversations) {
    const now = last(c.replicas);
    if (before[c.topic] === dead) assert.notEqual(now, dead, `${c.topic} moved off the dead replica`);
    else {
      assert.equal(now, before[c.topic], `${c.topic} stayed on replica ${before[c.topic]}`);
      assert.ok(last(c.cached) > 0, `${c.topic} still finds its prefix cached`);
    }
  }
  // Moved conversations settle on their new replica: the turn after the move finds its cache there.
  const moved = conversations.filter((c) => before[c.topic] === dead);
  assert.ok(moved.length >= 1);
  for (const c of moved) {
    const { replica, cached } = await turn(c);
    assert.equal(replica, c.replicas[c.replicas.length - 2], `${c.topic} stays on its new replica`);
    assert.ok(cached > 0, `${c.topic} reuses its cache on the new replica`);
  }
});
