// The official ollama npm client against kvad serve, and llama-server's own endpoints over fetch:
// what tools written for Ollama or llama.cpp do, unchanged. run.sh starts the server on the tiny
// model with --alias llama3.2 (a name such clients hard-code), --parallel 2 and an API key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import { assertAllValid } from './validate.mjs';

const URL = process.env.KVAD_URL, KEY = process.env.KVAD_KEY;
const auth = { Authorization: `Bearer ${KEY}` };
const ollama = new Ollama({ host: URL, headers: auth });
const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name three colours.' }];
const greedy = { temperature: 0, seed: 1, num_predict: 12 };

async function post(path, body, headers = auth) {
  const r = await fetch(URL + path, { method: 'POST', headers: { ...headers, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return [r.status, await r.json()];
}
async function get(path, headers = auth) {
  const r = await fetch(URL + path, { headers });
  return [r.status, await r.json()];
}

test('list, ps, show and version describe the served model under its alias', async () => {
  const { models } = await ollama.list();
  assert.equal(models[0].name, 'llama3.2');
  assert.equal(models[0].details.family, 'qwen2');
  assert.ok(models[0].size > 1e6, `size ${models[0].size}`);
  assert.match(models[0].digest, /^[0-9a-f]{64}$/);
  const ps = await ollama.ps();
  assert.equal(ps.models.length, 1);
  assert.equal(ps.models[0].name, 'llama3.2');
  const show = await ollama.show({ model: 'llama3.2:latest' });
  assert.match(show.template, /im_start/);  // the model's own chat template
  assert.equal(show.model_info['general.architecture'], 'qwen2');
  assert.ok(show.model_info['general.parameter_count'] > 1e6);
  const { version } = await ollama.version();
  assert.match(version, /^\d+\.\d+\.\d+$/);
});

test('chat: whole and streamed answers agree, with Ollama counts and durations', async () => {
  const whole = await ollama.chat({ model: 'llama3.2', messages, options: greedy, stream: false });
  assert.equal(whole.done, true);
  assert.equal(whole.message.role, 'assistant');
  assert.ok(whole.eval_count >= 1 && whole.eval_count <= 12, `eval_count ${whole.eval_count}`);
  if (whole.eval_count === 12) assert.equal(whole.done_reason, 'length');
  assert.ok(whole.prompt_eval_count > 10);
  assert.ok(whole.total_duration >= whole.eval_duration && whole.eval_duration > 0, JSON.stringify(whole));
  let text = '', parts = 0, last;
  for await (const part of await ollama.chat({ model: 'llama3.2', messages, options: greedy, stream: true })) {
    if (!part.done) { text += part.message.content; parts++; }
    last = part;
  }
  assert.ok(parts >= 1);
  assert.equal(text, whole.message.content);
  assert.equal(last.done, true);
  assert.equal(last.eval_count, whole.eval_count);
});

test('generate: the prompt through the template (with system), and raw', async () => {
  const r = await ollama.generate({ model: 'llama3.2', prompt: 'Hello', system: 'Be brief.', options: greedy, stream: false });
  assert.equal(r.done, true);
  assert.equal(typeof r.response, 'string');
  const raw = await ollama.generate({ model: 'llama3.2', prompt: 'Once upon a time', raw: true, options: greedy, stream: false });
  assert.ok(raw.prompt_eval_count < r.prompt_eval_count, 'raw: no template around the prompt');
  let streamed = '';
  for await (const part of await ollama.generate({ model: 'llama3.2', prompt: 'Once upon a time', raw: true, options: greedy, stream: true }))
    streamed += part.response;
  assert.equal(streamed, raw.response);
  // No prompt: Ollama's "load the model", answered at once.
  const load = await ollama.generate({ model: 'llama3.2', prompt: '' });
  assert.equal(load.done_reason, 'load');
});

// format: a random-weight model's answers held to a bounded schema, validated by Python's jsonschema.
const point = {
  type: 'object',
  properties: { label: { type: 'string', maxLength: 8 }, x: { type: 'integer' }, ok: { type: 'boolean' } },
  required: ['label', 'x', 'ok'],
};

test('format: a JSON Schema holds chat and generate answers, whole or streamed', async () => {
  const cases = [];
  for (let seed = 1; seed <= 4; seed++) {
    const r = await ollama.chat({ model: 'llama3.2', messages, format: point, options: { temperature: 1, seed, num_predict: 2000 }, stream: false });
    assert.equal(r.done_reason, 'stop', r.message.content);
    cases.push({ schema: point, text: r.message.content });
  }
  const opts = { temperature: 1, seed: 9, num_predict: 2000 };
  const whole = await ollama.generate({ model: 'llama3.2', prompt: 'A point:', format: point, options: opts, stream: false });
  let streamed = '';
  for await (const part of await ollama.generate({ model: 'llama3.2', prompt: 'A point:', format: point, options: opts, stream: true }))
    streamed += part.response;
  assert.equal(streamed, whole.response);
  cases.push({ schema: point, text: whole.response });
  assertAllValid(cases);
});

// Any JSON object: cut short, as in api.test.mjs (a random model takes thousands of tokens to end a string).
test('format "json": the answer opens a JSON object', async () => {
  const r = await ollama.chat({ model: 'llama3.2', messages, format: 'json', options: { temperature: 1, seed: 2, num_predict: 40 }, stream: false });
  assert.match(r.message.content, /^\{/);
  if (r.done_reason === 'stop') assert.equal(Object.getPrototypeOf(JSON.parse(r.message.content)), Object.prototype);
});

// Tools: Ollama's are OpenAI's, its calls come back with the arguments as an object. Ollama has no
// tool_choice; kvad takes OpenAI's on /api/chat too, which makes the tiny model call (a random model
// rarely does on its own) so that the reading of calls is tested end to end.
const weather = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } }, required: ['city'], additionalProperties: false };
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weather } }];
const ask = [{ role: 'user', content: 'Weather in Paris?' }];

test('tools: a forced call comes back in message.tool_calls, whole and streamed; a past call goes back to the model', async () => {
  const cases = [];
  for (let seed = 1; seed <= 3; seed++) {
    const body = { model: 'llama3.2', messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, options: { temperature: 1, seed, num_predict: 600 } };
    const [status, r] = await post('/api/chat', { ...body, stream: false });
    assert.equal(status, 200, JSON.stringify(r));
    assert.equal(r.message.tool_calls.length, 1, JSON.stringify(r.message));
    const call = r.message.tool_calls[0].function;
    assert.equal(call.name, 'get_weather');
    assert.equal(typeof call.arguments, 'object');
    cases.push({ schema: weather, text: JSON.stringify(call.arguments) });
    const resp = await fetch(URL + '/api/chat', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const lines = (await resp.text()).trim().split('\n').map(l => JSON.parse(l));
    const streamed = lines.flatMap(l => l.message?.tool_calls ?? []);
    assert.deepEqual(streamed, r.message.tool_calls);
    assert.equal(lines.at(-1).done, true);
  }
  assertAllValid(cases);
  const first = (await post('/api/chat', { model: 'llama3.2', messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, stream: false, options: { temperature: 1, seed: 4, num_predict: 600 } }))[1];
  const r = await ollama.chat({ model: 'llama3.2', tools, stream: false, options: greedy,
    messages: [...ask, first.message, { role: 'tool', content: '{"temperature": 22}', tool_name: 'get_weather' }] });
  assert.equal(typeof r.message.content, 'string');
  assert.ok(r.prompt_eval_count > first.prompt_eval_count);
});

test('errors come in Ollama\'s shape with their status', async () => {
  await assert.rejects(ollama.chat({ model: 'absent-model', messages }), e => e.status_code === 404 && /absent-model/.test(e.error));
  await assert.rejects(ollama.chat({ model: 'llama3.2', messages, options: { temperature: 'hot' } }),
    e => e.status_code === 400 && /options\.temperature/.test(e.error));
  await assert.rejects(ollama.chat({ model: 'llama3.2', messages: [{ role: 'user', content: 'x', images: ['aGk='] }] }),
    e => e.status_code === 400 && /images/.test(e.error));
  await assert.rejects(ollama.chat({ model: 'llama3.2', messages, format: { type: 'string', pattern: 'a+' } }),
    e => e.status_code === 400 && /'format': json_schema: keyword 'pattern' is not supported/.test(e.error));
  await assert.rejects(ollama.chat({ model: 'llama3.2', messages, format: 'yaml' }), e => e.status_code === 400 && /'format'/.test(e.error));
  // A pull runs `kvad pull`, which fails offline with its own message.
  await assert.rejects(ollama.pull({ model: 'kvad-test/absent', stream: false }), e => /offline|cache|connect|resolve/i.test(e.message));
  const [st] = await get('/api/tags', {});
  assert.equal(st, 401, 'the Ollama API needs the key like the rest');
});

test('llama-server: /tokenize and /detokenize round-trip, pieces included', async () => {
  const [s1, t] = await post('/tokenize', { content: 'Hello world, again', with_pieces: true });
  assert.equal(s1, 200);
  assert.ok(t.tokens.length >= 3);
  assert.equal(t.tokens.map(p => p.piece).join(''), 'Hello world, again');
  const [, ids] = await post('/tokenize', { content: 'Hello world, again' });
  assert.deepEqual(ids.tokens, t.tokens.map(p => p.id));
  const [s2, d] = await post('/detokenize', { tokens: ids.tokens });
  assert.equal(s2, 200);
  assert.equal(d.content, 'Hello world, again');
  const [s3, bad] = await post('/detokenize', { tokens: [1e9] });
  assert.equal(s3, 400);
  assert.match(bad.error.message, /tokens/);
  const [s4] = await post('/tokenize', { content: 'x' }, {});
  assert.equal(s4, 401);
});

test('llama-server: /props and /slots, a slot busy while a stream runs', async () => {
  const [, props] = await get('/props');
  assert.equal(props.total_slots, 2);
  assert.match(props.chat_template, /im_start/);
  const [, idle] = await get('/slots');
  assert.equal(idle.length, 2);
  assert.ok(idle.every(s => !s.is_processing));
  // /slots is the engine's state as of its last step: polled in a loop of its own for as long as
  // the stream runs, keeping the last busy answer. (Polled once per streamed part it failed on a
  // loaded machine: the tiny model reached the end of its context before this client read a part.)
  let seen = [], streaming = true;
  const poller = (async () => {
    while (streaming) {
      const [, slots] = await get('/slots');
      const busy = slots.filter(s => s.is_processing);
      if (busy.length) seen = busy;
    }
  })();
  const stream = await ollama.chat({ model: 'llama3.2', messages, options: { num_predict: -2, seed: 2 }, stream: true });  // -2: to the end of the context, whatever the model samples
  try {
    for await (const part of stream) {
      if (part.done) break;
      if (seen.length) stream.abort();
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  }
  streaming = false;
  await poller;
  assert.equal(seen.length, 1, JSON.stringify(seen));
  assert.ok(seen[0].n_prompt_tokens > 10 && seen[0].n_past >= seen[0].n_prompt_tokens, JSON.stringify(seen[0]));
});

test('embed and embeddings: unit vectors of the model\'s width, one per input, the older route agreeing', async () => {
  const r = await ollama.embed({ model: 'llama3.2', input: ['why is the sky blue?', 'because of Rayleigh scattering'] });
  assert.equal(r.model, 'llama3.2');
  assert.equal(r.embeddings.length, 2);
  for (const v of r.embeddings) {
    assert.equal(v.length, 64);
    assert.ok(Math.abs(Math.sqrt(v.reduce((s, x) => s + x * x, 0)) - 1) < 1e-5);
  }
  assert.ok(r.prompt_eval_count > 4 && r.total_duration > 0, JSON.stringify({ ...r, embeddings: undefined }));
  const old = await ollama.embeddings({ model: 'llama3.2', prompt: 'why is the sky blue?' });
  assert.equal(old.embedding.length, 64);
  for (let i = 0; i < 64; i++) assert.ok(Math.abs(old.embedding[i] - r.embeddings[0][i]) < 1e-5, `[${i}]`);
  // truncate (Ollama's default) cuts an input past the context; truncate: false refuses it
  const long = 'word '.repeat(5000);
  assert.equal((await ollama.embed({ model: 'llama3.2', input: long })).embeddings.length, 1);
  await assert.rejects(ollama.embed({ model: 'llama3.2', input: long, truncate: false }), /more than \d+ tokens/);
});
