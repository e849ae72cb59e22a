// The web UI in headless Chromium, as a person uses it: load the page, send a message, watch the
// answer stream in, open the dashboard and see figures. Screenshots of every page go to $SHOTS.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { launch } from './browser.mjs';

const URL = process.env.KVAD_URL;
const SHOTS = process.env.SHOTS;
let b, page;
const consoleErrors = [];

before(async () => {
  b = await launch();
  page = await b.newPage();
  page.on('pageerror', e => consoleErrors.push(String(e)));
  page.on('console', m => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  if (SHOTS) fs.mkdirSync(SHOTS, { recursive: true });
});
after(async () => { if (b) await b.close(); });

// Waits for fn in the page; on a timeout the error says what the page showed (toast, section text).
async function waitUntil(fn, what, timeout = 60000) {
  try {
    await page.waitForFunction(fn, null, { timeout });
  } catch (e) {
    const toast = await page.textContent('#toast').catch(() => '');
    const section = await page.textContent('.page.active').catch(() => '');
    throw new Error(`${what}: ${e.message}\ntoast: ${toast}\npage: ${section.replace(/\s+/g, ' ').slice(0, 600)}`);
  }
}

async function shot(name) { if (SHOTS) await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true }); }

test('the page loads from the binary and shows the loaded model', async () => {
  await page.goto(URL + '/');
  await page.waitForFunction(() => document.querySelector('#model-label').textContent.includes('tiny-qwen2'));
  assert.equal(await page.title(), 'kvad');
});

test('chat: a message gets a streamed answer with its stats', async () => {
  await page.fill('#chat-max', '48');
  await page.fill('#chat-input', 'Hello there, who are you?');
  // Count how often the answer's text changes while it streams: more than once means streaming.
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver(() => window.__updates++).observe(document.querySelector('#chat-log'), { subtree: true, characterData: true, childList: true });
  });
  await page.press('#chat-input', 'Enter');
  await page.waitForSelector('.msg.user');
  await page.waitForSelector('.msg.assistant .stats', { timeout: 60000 });
  const answer = await page.textContent('.msg.assistant .text');
  const stats = await page.textContent('.msg.assistant .stats');
  assert.ok(answer.length > 0, 'the answer has text');
  assert.match(stats, /\d+ tokens/);
  assert.match(stats, /cached/);
  assert.match(stats, /tok\/s/);
  assert.ok(await page.evaluate(() => window.__updates) > 3, 'the answer arrived in pieces');
  await shot('chat');
  // A second turn reuses the cached prefix.
  await page.fill('#chat-input', 'Tell me more.');
  await page.press('#chat-input', 'Enter');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant .stats').length === 2, null, { timeout: 60000 });
  const stats2 = await page.textContent('.msg.assistant:nth-of-type(4) .stats');
  const cached = Number(/\((\d+) cached\)/.exec(stats2)[1]);
  assert.ok(cached > 10, `second turn cached ${cached} tokens: ${stats2}`);
});

test('dashboard shows live figures', async () => {
  await page.click('#tabs button[data-page=dashboard]');
  await page.waitForSelector('#dash-cards .card');
  await page.waitForTimeout(1500);
  const cards = await page.$$eval('#dash-cards .card', cs => Object.fromEntries(cs.map(c => [c.querySelector('.k').textContent, c.querySelector('.v').textContent])));
  for (const k of ['Resident memory (RSS)', 'Weights', 'KV cache held now', 'Same conversation at full context', 'KV bytes per token', 'Cached tokens, last request', 'Decode', 'Prefill'])
    assert.ok(k in cards, `card ${k}`);
  assert.match(cards['Resident memory (RSS)'], /\d+(\.\d+)? MB/);
  assert.match(cards['KV bytes per token'], /\d+(\.\d+)? (B|KB)/);
  assert.match(cards['KV cache held now'], /\d/);
  assert.notEqual(cards['Decode'], '0.0 tok/s');
  await shot('dashboard');
});

test('models, scoring, benchmark and training pages render', async () => {
  await page.click('#tabs button[data-page=models]');
  await page.waitForSelector('#models-table tbody tr.loaded');
  await shot('models');
  await page.click('#tabs button[data-page=score]');
  await page.fill('#score-text', 'The quick brown fox jumps over the lazy dog. '.repeat(4));
  await page.click('#score-form button[type=submit]');
  await waitUntil(() => [...document.querySelectorAll('#score-result .k')].some(k => k.textContent === 'Perplexity'), 'scoring result');
  await shot('scoring');
  await page.click('#tabs button[data-page=bench]');
  await page.fill('#bench-lengths', '8,32');
  await page.fill('#bench-decode', '8');
  await page.click('#bench-model-form button[type=submit]');
  await waitUntil(() => document.querySelectorAll('#bench-model-table tbody tr').length === 2 && !document.querySelector('#bench-model-table tbody').textContent.includes('running'), 'model benchmark rows');
  // The serving sweep: two levels, a point per level in both charts, rows with real figures.
  await page.fill('#serving-levels', '1,2');
  await page.fill('#serving-input', '8');
  await page.fill('#serving-output', '6');
  await page.click('#serving-start');
  await waitUntil(() => document.querySelector('#serving-progress').textContent.startsWith('Finished'), 'serving sweep finished', 60000);
  const rows = await page.$$eval('#serving-table tbody tr', trs => trs.map(tr => [...tr.children].map(td => td.textContent)));
  assert.equal(rows.length, 2);
  assert.deepEqual(rows.map(r => r[0]), ['1', '2']);
  assert.deepEqual(rows.map(r => r[1]), ['4', '4']);  // 2 x the level, at least 4, none failed
  for (const r of rows) assert.ok(parseFloat(r[2]) > 0, `output tok/s ${r[2]}`);
  const drawn = await page.$eval('#serving-itl', c => {  // some pixels in the chart's colours
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let blue = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 2] > 180 && d[i] < 80) blue++;
    return blue;
  });
  assert.ok(drawn > 20, 'the ITL chart has its points drawn');
  await shot('benchmark');
  assert.deepEqual(consoleErrors, []);
});

test('training: upload a text, watch the loss, read samples, the model appears in Models', async () => {
  await page.click('#tabs button[data-page=train]');
  const text = 'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness. '.repeat(40);
  await page.setInputFiles('#train-file', { name: 'corpus.txt', mimeType: 'text/plain', buffer: Buffer.from(text) });
  await page.fill('#train-name', 'ui-trained');
  await page.selectOption('#train-size', 'tiny');
  await page.fill('#train-steps', '40');
  await page.click('#train-start');
  await waitUntil(() => [...document.querySelectorAll('#train-cards .v')].some(v => v.textContent === 'finished'), 'training finished', 120000);
  const samples = await page.$$('#train-samples .sample');
  assert.ok(samples.length >= 1, 'a sample at a checkpoint');
  assert.match(await page.textContent('#train-log'), /val loss/);
  await shot('training');
  await page.click('#tabs button[data-page=models]');
  await waitUntil(() => document.querySelector('#models-table').textContent.includes('ui-trained'), 'trained model listed');
  assert.deepEqual(consoleErrors, []);
});
