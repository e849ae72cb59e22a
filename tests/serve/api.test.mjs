// The official openai npm client against kvad serve: what an existing application does, unchanged.
// Needs KVAD_URL and KVAD_KEY (run.sh starts the server on a tiny synthesized model).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { assertAllValid } from './validate.mjs';

const client = new OpenAI({ baseURL: process.env.KVAD_URL + '/v1', apiKey: process.env.KVAD_KEY, maxRetries: 0, timeout: 60000 });
let model;
const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name three colours.' }];

test('models.list names the loaded model', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  model = list.data[0].id;
  assert.equal(model, 'tiny-qwen2');
  assert.equal(list.data[0].object, 'model');
  const one = await client.models.retrieve(model);
  assert.equal(one.id, model);
});

test('chat completion (non-streaming): shape, usage, finish_reason', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0.7, seed: 42 });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.ok(r.usage.prompt_tokens > 10);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  if (r.usage.completion_tokens === 12) assert.equal(c.finish_reason, 'length');
});

test('same seed, same text; max_completion_tokens is honoured', async () => {
  const a = await client.chat.completions.create({ model, messages, max_completion_tokens: 10, temperature: 1, seed: 7 });
  const b = await client.chat.completions.create({ model, messages, max_completion_tokens: 10, temperature: 1, seed: 7 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.ok(a.usage.completion_tokens <= 10);
});

test('streaming: chunks, [DONE], include_usage, same text as non-streaming', async () => {
  const params = { model, messages, max_tokens: 16, temperature: 0, seed: 1 };
  const whole = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '', chunks = 0, role = null, finish = null, usage = null, timings = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) { usage = chunk.usage; timings = chunk.timings; }
    if (!chunk.choices.length) continue;
    const d = chunk.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) { text += d.content; chunks++; }
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.ok(chunks >= 1);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.ok(usage, 'the last chunk carries usage');
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  // The engine's speeds ride with the usage (the web UI shows them: its own clock sees network reads).
  assert.ok(timings && timings.decode_tokens_per_second > 0 && timings.time_to_first_token_seconds > 0, JSON.stringify(timings));
  assert.equal(typeof whole.timings.decode_tokens_per_second, 'number');
});

test('prefix reuse: the next turn of a conversation reports cached tokens', async () => {
  const first = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, seed: 3 });
  const next = [...messages, { role: 'assistant', content: first.choices[0].message.content }, { role: 'user', content: 'And three more?' }];
  const second = await client.chat.completions.create({ model, messages: next, max_tokens: 8, temperature: 0, seed: 3 });
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  // Reuse is by whole KV blocks (the last, partial block of the first turn is recomputed).
  const stats = await (await fetch(`${process.env.KVAD_URL}/kvad/stats`, { headers: { Authorization: `Bearer ${process.env.KVAD_KEY}` } })).json();
  const bs = stats.kv_blocks.block_size;
  const whole = Math.floor((first.usage.prompt_tokens - 1) / bs) * bs;
  assert.ok(bs >= 1 && whole >= bs, `the first turn (${first.usage.prompt_tokens} tokens) must span a block of ${bs}`);
  assert.ok(cached >= whole, `cached ${cached} of the ${first.usage.prompt_tokens} tokens already seen (blocks of ${bs})`);
  assert.ok(cached < second.usage.prompt_tokens);
});

test('stop (string and list) cuts the answer before the stop text', async () => {
  const base = { model, messages, max_tokens: 40, temperature: 0, seed: 9 };
  const full = (await client.chat.completions.create(base)).choices[0].message.content;
  assert.ok(full.length > 8, 'need some text to cut: ' + JSON.stringify(full));
  const cps = Array.from(full);  // code points: never split a surrogate pair
  const stopAt = cps.slice(Math.floor(cps.length / 2), Math.floor(cps.length / 2) + 2).join('');
  const cut = await client.chat.completions.create({ ...base, stop: stopAt });
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.equal(cut.choices[0].message.content, full.slice(0, full.indexOf(stopAt)));
  const cut2 = await client.chat.completions.create({ ...base, stop: ['\u0000never', stopAt] });
  assert.equal(cut2.choices[0].message.content, cut.choices[0].message.content);
});

test('penalties and top_p are accepted', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 6, top_p: 0.9, presence_penalty: 0.5, frequency_penalty: 0.5, seed: 2 });
  assert.ok(r.usage.completion_tokens >= 1);
});

test('logprobs with top_logprobs', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  assert.ok(lp.length >= 1);
  for (const t of lp) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob);
    // greedy: the chosen token is the most likely one
    assert.ok(Math.abs(t.logprob - t.top_logprobs[0].logprob) < 1e-5);
  }
});

test('n choices: each its own text, usage of all, the prompt computed once', async () => {
  const params = { model, messages, max_tokens: 10, temperature: 1, seed: 11 };
  const r = await client.chat.completions.create({ ...params, n: 3 });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map(c => c.index), [0, 1, 2]);
  // Choice i samples with seed + i: choice 1 is what n = 1 with seed 12 says.
  const alone = await client.chat.completions.create({ ...params, seed: 12 });
  assert.equal(r.choices[1].message.content, alone.choices[0].message.content);
  const one = await client.chat.completions.create(params);
  assert.equal(r.choices[0].message.content, one.choices[0].message.content);
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  for (const c of r.choices) assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.ok(r.usage.completion_tokens >= 3 && r.usage.completion_tokens <= 30);
});

test('n choices streamed: deltas per index, one [DONE], usage summed', async () => {
  const params = { model, messages, max_tokens: 8, temperature: 1, seed: 21, n: 2 };
  const whole = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const text = ['', ''], finish = [null, null];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.content) text[c.index] += c.delta.content;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(text, whole.choices.map(c => c.message.content));
  assert.deepEqual(finish, whole.choices.map(c => c.finish_reason));
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('n beyond what the server runs at once is refused clearly', async () => {
  await assert.rejects(client.chat.completions.create({ model, messages, n: 5 }),
    e => e.status === 400 && /'n' is 5 but this server generates at most 4 choices/.test(e.message));
});

test('unknown model is a 404 NotFoundError', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'gpt-4o', messages }), e => e instanceof OpenAI.NotFoundError);
});

test('completions (non-streaming and streaming)', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, seed: 4 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  const s = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, seed: 4, stream: true });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
  const ids = await client.completions.create({ model, prompt: [9707, 11, 1879], max_tokens: 3, logprobs: 2 });
  assert.equal(ids.usage.prompt_tokens, 3);
  assert.ok(ids.choices[0].logprobs.tokens.length >= 1 && ids.choices[0].logprobs.tokens.length <= ids.usage.completion_tokens);
});

// Structured outputs. The model has random weights (no idea of JSON), so every guarantee below is the
// grammar's: the schemas are bounded (maxLength, maxItems, enums) so that the answer must end, and
// every answer is validated by Python's jsonschema (validate.mjs), not by kvad's grammar code.
const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 10 },
    age: { type: 'integer' },
    member: { type: 'boolean' },
    colour: { enum: ['red', 'green', 'blue', null] },
    tags: { type: 'array', items: { type: 'string', maxLength: 4 }, maxItems: 3 },
    home: { type: 'object', properties: { x: { type: 'number' }, y: { type: 'number' } }, required: ['x', 'y'] },
  },
  required: ['name', 'age', 'member', 'colour', 'tags', 'home'],
  additionalProperties: false,
};
const personFormat = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } };

test('response_format json_schema: every answer validates, over seeds, properties in the schema\'s order', async () => {
  const cases = [];
  for (let seed = 1; seed <= 6; seed++) {
    const r = await client.chat.completions.create({ model, messages, response_format: personFormat, temperature: 1, seed, max_tokens: 2000 });
    const text = r.choices[0].message.content;
    assert.equal(r.choices[0].finish_reason, 'stop', text);
    assert.deepEqual(Object.keys(JSON.parse(text)), Object.keys(person.properties), text);
    cases.push({ schema: person, text });
  }
  assertAllValid(cases);
});

test('json_schema with n = 3, whole and streamed: the same texts, each valid', async () => {
  const params = { model, messages, response_format: personFormat, temperature: 1, seed: 31, n: 3, max_tokens: 2000 };
  const whole = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const text = ['', '', ''];
  for await (const chunk of stream)
    for (const c of chunk.choices) if (c.delta.content) text[c.index] += c.delta.content;
  assert.deepEqual(text, whole.choices.map(c => c.message.content));
  for (const c of whole.choices) assert.equal(c.finish_reason, 'stop', c.message.content);
  assertAllValid(text.map(t => ({ schema: person, text: t })));
});

// Any JSON object has unbounded strings, which a random model, picking among ~150k tokens of which a
// few dozen close a string, takes thousands of tokens to end: so the answer is cut short here, and
// checked to open an object where the free answer of the same seed does not. The guarantee for
// answers that end is tests/runtime_grammar_generate.cpp's.
test('response_format json_object: the answer opens a JSON object; one that ends is one', async () => {
  for (let seed = 1; seed <= 3; seed++) {
    const params = { model, messages, temperature: 1, seed, max_tokens: 40 };
    const r = await client.chat.completions.create({ ...params, response_format: { type: 'json_object' } });
    const text = r.choices[0].message.content;
    assert.match(text, /^\{/);
    if (r.choices[0].finish_reason === 'stop') assert.equal(Object.getPrototypeOf(JSON.parse(text)), Object.prototype, text);
    const free = await client.chat.completions.create(params);
    assert.doesNotMatch(free.choices[0].message.content, /^\{/);
  }
});

test('llama-server\'s grammar (GBNF) and json_schema fields, on chat and completions', async () => {
  for (let seed = 1; seed <= 4; seed++) {
    const r = await client.chat.completions.create({ model, messages, grammar: 'root ::= "yes" | "no"', temperature: 1, seed });
    assert.match(r.choices[0].message.content, /^(yes|no)$/);
    assert.equal(r.choices[0].finish_reason, 'stop');
  }
  const colours = { enum: ['red', 'green', 'blue'] };
  const c = await client.completions.create({ model, prompt: 'Colour:', json_schema: colours, temperature: 1, seed: 5 });
  assert.ok(colours.enum.includes(JSON.parse(c.choices[0].text)), c.choices[0].text);
  let streamed = '';
  const s = await client.completions.create({ model, prompt: 'Person:', response_format: personFormat, temperature: 1, seed: 6, max_tokens: 2000, stream: true });
  for await (const chunk of s) streamed += chunk.choices[0]?.text ?? '';
  assertAllValid([{ schema: person, text: streamed }]);
});

test('a schema the output cannot be held to is a 400 naming the field, with the reason', async () => {
  const schema = { type: 'object', properties: { a: { type: 'string', pattern: '^a' } } };
  await assert.rejects(client.chat.completions.create({ model, messages, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }),
    e => e.status === 400 && e.param === 'response_format.json_schema.schema' &&
      /json_schema: keyword 'pattern' is not supported \(at #\/properties\/a\)/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model, messages, grammar: 'root ::= undefined-rule' }),
    e => e.status === 400 && e.param === 'grammar' && /'undefined-rule'/.test(e.message));
});

// Tool calls. A random model rarely calls on its own, so the end-to-end guarantee is tested where
// decoding is constrained: with tool_choice required or named, every answer is a well-formed call
// (Qwen's <tool_call> syntax, which the tiny model's template teaches), read back into tool_calls
// whose arguments parse and validate against the function's schema (Python's jsonschema). Strings
// are bounded so that a random model ends its calls in a few hundred tokens.
const weather = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer' } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const lookup = { type: 'object', properties: { word: { type: 'string', maxLength: 8 } }, required: ['word'], additionalProperties: false };
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: weather } },
  { type: 'function', function: { name: 'lookup', description: 'Look a word up', parameters: lookup } },
];
const schemaOf = { get_weather: weather, lookup };
const askTools = [{ role: 'user', content: 'What is the weather in Paris?' }];

// [{name, arguments}] of a streamed answer, put together as the openai client's users do.
async function streamedCalls(stream) {
  const calls = [];
  let content = '', finish;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.content) content += c.delta.content;
    for (const t of c.delta.tool_calls ?? []) {
      if (!calls[t.index]) calls[t.index] = { id: t.id, name: '', arguments: '' };
      if (t.function?.name) calls[t.index].name += t.function.name;
      if (t.function?.arguments) calls[t.index].arguments += t.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { calls, content, finish };
}

test('tool_choice required and named: always a well-formed call whose arguments validate, whole and streamed', async () => {
  const cases = [];
  for (let seed = 1; seed <= 4; seed++) {
    for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
      const params = { model, messages: askTools, tools, tool_choice, parallel_tool_calls: false, temperature: 1, seed, max_tokens: 600 };
      const r = await client.chat.completions.create(params);
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(m));
      assert.equal(m.tool_calls.length, 1, JSON.stringify(m));
      const call = m.tool_calls[0];
      assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
      assert.equal(call.type, 'function');
      if (typeof tool_choice === 'object') assert.equal(call.function.name, 'get_weather');
      assert.ok(call.function.name in schemaOf, call.function.name);
      cases.push({ schema: schemaOf[call.function.name], text: call.function.arguments });
      const s = await streamedCalls(await client.chat.completions.create({ ...params, stream: true }));
      assert.equal(s.finish, 'tool_calls');
      assert.equal(s.calls.length, 1);
      assert.deepEqual([s.calls[0].name, s.calls[0].arguments], [call.function.name, call.function.arguments]);
      assert.match(s.calls[0].id, /^call_/);
    }
  }
  assertAllValid(cases);
});

test('a past call and its result go back to the model; tool_choice none answers in text', async () => {
  const first = await client.chat.completions.create({ model, messages: askTools, tools, tool_choice: 'required', parallel_tool_calls: false, temperature: 1, seed: 5, max_tokens: 600 });
  const call = first.choices[0].message.tool_calls[0];
  const next = [...askTools, first.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '{"temperature": 22}' }];
  const r = await client.chat.completions.create({ model, messages: next, tools, tool_choice: 'none', max_tokens: 8, temperature: 0 });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.usage.prompt_tokens > first.usage.prompt_tokens);
});

test('parallel_tool_calls: one or more calls, each valid', async () => {
  const cases = [];
  for (let seed = 11; seed <= 13; seed++) {
    const r = await client.chat.completions.create({ model, messages: askTools, tools, tool_choice: 'required', temperature: 1, seed, max_tokens: 2000 });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    const calls = r.choices[0].message.tool_calls;
    assert.ok(calls.length >= 1);
    assert.equal(new Set(calls.map(c => c.id)).size, calls.length);
    for (const c of calls) cases.push({ schema: schemaOf[c.function.name], text: c.function.arguments });
  }
  assertAllValid(cases);
});

test('tool refusals name the field', async () => {
  await assert.rejects(client.chat.completions.create({ model, messages, tools: [{ type: 'function', function: { description: 'x' } }] }),
    e => e.status === 400 && e.param === 'tools[0].function.name');
  await assert.rejects(client.chat.completions.create({ model, messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    e => e.status === 400 && e.param === 'tool_choice.function.name');
  await assert.rejects(client.chat.completions.create({ model, messages, tool_choice: 'required', tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'x' } } } } }] }),
    e => e.status === 400 && e.param === 'tools[0].function.parameters' && /'pattern'/.test(e.message));
});

// Embeddings (the vectors themselves are checked against numpy in tests/runtime_embed.cpp): what a
// client relies on over HTTP. The openai client asks for base64 unless told otherwise and decodes
// it itself, so the default call checks kvad's base64 against its float answer.
const norm = v => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const near = (a, b, tol, what) => {
  assert.equal(a.length, b.length, what);
  for (let i = 0; i < a.length; i++) assert.ok(Math.abs(a[i] - b[i]) <= tol, `${what}: [${i}] ${a[i]} vs ${b[i]}`);
};

test('embeddings: one unit vector per input in order, the same alone as batched, base64 = float', async () => {
  const texts = ['The quick brown fox', 'jumps over', 'the lazy dog, twice over and again'];
  const b64 = await client.embeddings.create({ model, input: texts });
  const flt = await client.embeddings.create({ model, input: texts, encoding_format: 'float' });
  assert.equal(flt.object, 'list');
  assert.equal(flt.model, model);
  assert.equal(flt.data.length, 3);
  assert.ok(flt.usage.prompt_tokens >= 8 && flt.usage.total_tokens === flt.usage.prompt_tokens, JSON.stringify(flt.usage));
  flt.data.forEach((d, i) => {
    assert.equal(d.object, 'embedding');
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, 64);  // the tiny model's width
    assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, `input ${i} has norm ${norm(d.embedding)}`);
    near(b64.data[i].embedding, d.embedding, 0, `base64 input ${i}`);  // float32 both ways: exact
  });
  assert.ok(Math.abs(flt.data[0].embedding[0] - flt.data[1].embedding[0]) > 1e-6, 'different texts, different vectors');
  const alone = await client.embeddings.create({ model, input: texts[1], encoding_format: 'float' });
  near(alone.data[0].embedding, flt.data[1].embedding, 1e-5, 'alone vs batched');
});

test('embeddings: dimensions is a renormalised prefix; token ids embed as their text does', async () => {
  const text = 'Name three colours.';
  const full = (await client.embeddings.create({ model, input: text, encoding_format: 'float' })).data[0].embedding;
  const cut = (await client.embeddings.create({ model, input: text, dimensions: 16, encoding_format: 'float' })).data[0].embedding;
  assert.equal(cut.length, 16);
  const prefix = norm(full.slice(0, 16));
  near(cut, full.slice(0, 16).map(x => x / prefix), 1e-5, 'dimensions 16');
  const tok = await fetch(process.env.KVAD_URL + '/tokenize', {
    method: 'POST', headers: { Authorization: `Bearer ${process.env.KVAD_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ content: text, add_special: true }) });
  const ids = (await tok.json()).tokens;
  const byIds = await client.embeddings.create({ model, input: [ids, ids.slice(0, 2)], encoding_format: 'float' });
  near(byIds.data[0].embedding, full, 1e-5, 'token ids vs text');
  assert.equal(byIds.data.length, 2);
});

test('embeddings: refusals name the field', async () => {
  const refused = async (body, param) => {
    await assert.rejects(client.embeddings.create({ model, ...body }), e => {
      assert.equal(e.status, 400, e.message);
      assert.equal(e.param, param, e.message);
      return true;
    });
  };
  await refused({ input: [] }, 'input');
  await refused({ input: '' }, 'input');
  await refused({ input: 'x', dimensions: 65 }, 'dimensions');
  await refused({ input: [[1, 2, 1e9]] }, 'input');
  await refused({ input: 'x', encoding_format: 'int8' }, 'encoding_format');
  await refused({ input: 'word '.repeat(5000) }, 'input');  // past the context
});

// The openai client's own schema helpers (zod), as applications write structured outputs and tools
// with it: the schema it generates (draft-07, $schema included) is enforced, and the client's parse()
// turns the answer into the object, validating it with zod on its side. (No bounded strings here: zod's
// max() counts UTF-16 units, JSON Schema's maxLength code points, so a random model's emoji in a name of
// 10 characters is valid to the schema and too long to zod.)
test('the client\'s zod helpers: parse() gets a parsed object and parsed tool arguments', async () => {
  const Person = z.object({ age: z.number().int(), member: z.boolean(), colour: z.enum(['red', 'green', 'blue']), tags: z.array(z.enum(['a', 'b'])).max(3) });
  const GetWeather = z.object({ city: z.enum(['Paris', 'Oslo']), unit: z.enum(['celsius', 'fahrenheit']), days: z.number().int() });
  for (let seed = 1; seed <= 3; seed++) {
    const r = await client.beta.chat.completions.parse({ model, messages, response_format: zodResponseFormat(Person, 'person'),
      temperature: 1, seed, max_tokens: 2000 });
    const p = r.choices[0].message.parsed;
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
    assert.deepEqual(Object.keys(p), ['age', 'member', 'colour', 'tags'], r.choices[0].message.content);
    Person.parse(p);
    const t = await client.beta.chat.completions.parse({ model, messages: askTools, tools: [zodFunction({ name: 'get_weather', parameters: GetWeather })],
      tool_choice: 'required', temperature: 1, seed, max_tokens: 600 });
    const call = t.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    GetWeather.parse(call.function.parsed_arguments);
  }
});
