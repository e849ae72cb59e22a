// Image generation through the official openai npm client (client.images.generate), kvad's
// streaming /kvad/images as the UI reads it, and the refusals, on the tiny SD 1.5 pipeline of
// tests/fixtures/peer-image. The server also holds a language model: a chat answered while an
// image paints shows the painter's steps take turns with the engine instead of stopping it.
// Needs KVAD_URL and KVAD_KEY (run.sh api starts the server).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const URL = process.env.KVAD_URL, KEY = process.env.KVAD_KEY;
const client = new OpenAI({ baseURL: URL + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });
const model = 'sd15-tiny';

// A PNG's size and its text chunks, read from the bytes (IHDR, tEXt).
function readPng(b64) {
  const b = Buffer.from(b64, 'base64');
  assert.deepEqual([...b.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG signature');
  const out = { width: b.readUInt32BE(16), height: b.readUInt32BE(20), text: {} };
  for (let at = 8; at < b.length;) {
    const len = b.readUInt32BE(at), type = b.toString('latin1', at + 4, at + 8);
    if (type === 'tEXt') {
      const data = b.subarray(at + 8, at + 8 + len), nul = data.indexOf(0);
      out.text[data.toString('latin1', 0, nul)] = data.toString('latin1', nul + 1);
    }
    at += 12 + len;
  }
  return out;
}

async function events(body) {
  const res = await fetch(URL + '/kvad/images', { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + KEY }, body: JSON.stringify(body) });
  assert.equal(res.status, 200, await res.clone().text());
  const text = await res.text();
  return text.split('\n\n').filter(l => l.startsWith('data: ')).map(l => JSON.parse(l.slice(6)));
}

test('images.generate: a PNG of the asked size with its parameters; same seed, same image', async () => {
  const ask = { model, prompt: 'a red fox in fresh snow', size: '128x128', response_format: 'b64_json', steps: 4, seed: 7 };
  const r = await client.images.generate(ask);
  assert.equal(r.data.length, 1);
  const png = readPng(r.data[0].b64_json);
  assert.equal(png.width, 128);
  assert.equal(png.height, 128);
  assert.match(png.text.parameters, /^a red fox in fresh snow\nSteps: 4, Sampler: Euler, CFG scale: 7.5, Seed: 7, Size: 128x128, Model: sd15-tiny$/);
  assert.equal(r.data[0].seed, 7);
  const again = await client.images.generate(ask);
  assert.equal(again.data[0].b64_json, r.data[0].b64_json, 'the same seed paints the same image');
  const other = await client.images.generate({ ...ask, seed: 8 });
  assert.notEqual(other.data[0].b64_json, r.data[0].b64_json);
});

test('n images take seeds seed, seed + 1, ...; a negative prompt and euler_a are honoured', async () => {
  const base = { model, prompt: 'a lighthouse', size: '64x128', steps: 3, seed: 100, response_format: 'b64_json' };
  const two = await client.images.generate({ ...base, n: 2 });
  assert.deepEqual(two.data.map(d => d.seed), [100, 101]);
  const second = await client.images.generate({ ...base, seed: 101 });
  assert.equal(second.data[0].b64_json, two.data[1].b64_json);
  const png = readPng(two.data[0].b64_json);
  assert.equal(png.width, 64);
  assert.equal(png.height, 128);
  const neg = await client.images.generate({ ...base, negative_prompt: 'fog', sampler: 'euler_a' });
  assert.match(readPng(neg.data[0].b64_json).text.parameters, /\nNegative prompt: fog\nSteps: 3, Sampler: Euler a,/);
  assert.notEqual(neg.data[0].b64_json, two.data[0].b64_json);
});

test('the UI stream: an event per step with an ETA and a preview, then the same PNG as /v1', async () => {
  const ask = { model, prompt: 'a red fox in fresh snow', size: '128x128', steps: 4, seed: 7, previews: true };
  const ev = await events(ask);
  const steps = ev.filter(e => e.step);
  assert.deepEqual(steps.map(e => e.step), [1, 2, 3, 4]);
  assert.ok(steps.every(e => e.total === 4 && e.eta_seconds >= 0));
  assert.equal(steps.at(-1).eta_seconds, 0);
  const preview = readPng(steps[0].preview);
  assert.equal(preview.width, 32, 'the 16x16 latent at x2');
  const done = ev.filter(e => e.png);
  assert.equal(done.length, 1);
  const v1 = await client.images.generate({ ...ask, response_format: 'b64_json', previews: undefined });
  assert.equal(done[0].png, v1.data[0].b64_json);
  assert.ok(ev.at(-1).done);
});

test('stream: OpenAI\'s partial_image events spread over the steps, then completed with the same PNG as a whole answer', async () => {
  const ask = { model, prompt: 'a red fox in fresh snow', size: '128x128', steps: 6, seed: 7 };
  const res = await fetch(URL + '/v1/images/generations', { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + KEY },
    body: JSON.stringify({ ...ask, stream: true, partial_images: 2 }) });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  const ev = (await res.text()).split('\n\n').filter(l => l.startsWith('data: ')).map(l => JSON.parse(l.slice(6)));
  assert.deepEqual(ev.map(e => e.type), ['image_generation.partial_image', 'image_generation.partial_image', 'image_generation.completed']);
  assert.deepEqual(ev.slice(0, 2).map(e => [e.partial_image_index, e.step]), [[0, 2], [1, 4]]);
  assert.equal(readPng(ev[0].b64_json).width, 128, 'a partial image is the whole picture so far');
  assert.equal(ev[2].size, '128x128');
  const whole = await client.images.generate({ ...ask, response_format: 'b64_json' });
  assert.equal(ev[2].b64_json, whole.data[0].b64_json);
});

test('the gallery lists what was painted, newest first, each PNG at its url', async () => {
  const r = await client.images.generate({ model, prompt: 'for the gallery', size: '64x64', steps: 2, seed: 31, response_format: 'b64_json' });
  const auth = { Authorization: 'Bearer ' + KEY };
  const g = await (await fetch(URL + '/kvad/images/gallery', { headers: auth })).json();
  assert.ok(g.images.length >= 2);
  assert.equal(g.images[0].prompt, 'for the gallery');
  assert.equal(g.images[0].seed, 31);
  assert.ok(g.images[0].id > g.images[1].id);
  const png = await fetch(URL + g.images[0].url, { headers: auth });
  assert.equal(png.headers.get('content-type'), 'image/png');
  assert.equal(Buffer.from(await png.arrayBuffer()).toString('base64'), r.data[0].b64_json);
  assert.equal((await fetch(URL + '/kvad/images/gallery/999999.png', { headers: auth })).status, 404);
  assert.equal((await fetch(URL + '/kvad/images/gallery')).status, 401, 'the gallery needs the key too');
});

test('a chat is answered while an image paints', async () => {
  const painting = client.images.generate({ model, prompt: 'a slow painting', size: '128x128', steps: 40, seed: 1, response_format: 'b64_json' });
  const t0 = Date.now();
  const chat = await client.chat.completions.create({ model: 'tiny-qwen2', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });
  const chatDone = Date.now() - t0;
  assert.ok(chat.choices[0].message.content.length >= 0);
  const r = await painting;
  const paintDone = Date.now() - t0;
  assert.equal(readPng(r.data[0].b64_json).width, 128);
  // The chat's ~9 engine steps each wait for one painting stage (of ~42): done a quarter of the way in,
  // where a painting that held the engine throughout would have kept it waiting to the end.
  assert.ok(chatDone < paintDone * 0.6, `the chat (${chatDone} ms) waited for the image (${paintDone} ms)`);
});

test('refusals name the field; an unknown model is a 404; no key is a 401', async () => {
  const cases = [
    [{ model, prompt: 'x', size: '100x128' }, 'size', /multiples of 64/],
    [{ model, prompt: 'x', size: 'big' }, 'size', /WIDTHxHEIGHT/],
    [{ model, prompt: 'x', response_format: 'url' }, 'response_format', /b64_json/],
    [{ model }, 'prompt', /required/],
    [{ model, prompt: 'x', n: 5 }, 'n', /./],
    [{ model, prompt: 'x', steps: 1000 }, 'steps', /./],
    [{ model, prompt: 'x'.repeat(5000) }, 'prompt', /at most 4000/],
    [{ model, prompt: 'x', sampler: 'ddim' }, 'sampler', /euler or euler_a/],
  ];
  for (const [body, param, msg] of cases) {
    await assert.rejects(client.images.generate(body), e => {
      assert.equal(e.status, 400, JSON.stringify(body).slice(0, 80));
      assert.equal(e.param, param);
      assert.match(e.message, msg);
      return true;
    });
  }
  await assert.rejects(client.images.generate({ model: 'no-such', prompt: 'x' }), e => e.status === 404 && /sd15-tiny/.test(e.message));
  const anon = new OpenAI({ baseURL: URL + '/v1', apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(anon.images.generate({ model, prompt: 'x' }), e => e.status === 401);
  const res = await fetch(URL + '/kvad/images', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"prompt":"x"}' });
  assert.equal(res.status, 401, 'the UI route is guarded by the key too');
});

test('a size the memory budget cannot hold is a 400 on size, saying what it needs and what is left', async () => {
  // run.sh starts this server with --memory 1GiB: 2048x2048 needs ~3.4 GB on the tiny pipeline's VAE.
  await assert.rejects(client.images.generate({ model, prompt: 'a fox', size: '2048x2048', steps: 1 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.param, 'size');
    assert.match(e.message, /painting 2048x2048 needs about [0-9.]+ GB of working memory; the language model \([0-9.]+ [kM]?B\) and the image models \([0-9.]+ [kMG]?B\) leave [0-9.]+ [MG]B of the server's memory budget \(1\.07 GB, --memory\)/);
    return true;
  });
  const models = await (await fetch(URL + '/kvad/images/models', { headers: { Authorization: 'Bearer ' + KEY } })).json();
  assert.match(models.models[0].weights, /^UNet f32, VAE f32, text encoders as stored$/);
  assert.ok(models.models[0].resident_bytes > 0);
});
