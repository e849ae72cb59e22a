// The web UI's pages in headless Chromium, as a person uses them: load the page, chat, open each
// page by its tab, by typing its address, by reload and with Back, and see its figures; a phone's
// width and dark mode. One screenshot of every page goes to $SHOTS. The chat's own features
// (markdown, conversations, settings, editing) are in ui-chat.test.mjs.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { URL, openBrowser, waitUntil, waitForPage, activePage, waitForAnswers, shot } from './ui-lib.mjs';

let b, page, errors;
before(async () => ({ b, page, errors } = await openBrowser()));
after(async () => { if (b) await b.close(); });

const tab = name => page.click(`#tabs a[data-page=${name}]`);

// What each page shows once its data is in: a reload or a typed address must reach the same.
const shows = {
  chat: () => /\d+ \/ [\d,]+ tokens/.test(document.querySelector('#chat-tokens').textContent) && document.querySelectorAll('#conv-list li').length > 0,
  models: () => !!document.querySelector('#models-table tbody tr.loaded'),
  dashboard: () => document.querySelectorAll('#dash-cards .card').length >= 8,
  train: () => document.querySelector('#train-cards').textContent.includes('ui-trained'),
  score: () => [...document.querySelectorAll('#score-result .k')].some(k => k.textContent === 'Perplexity'),
  bench: () => document.querySelectorAll('#bench-model-table tbody tr').length === 2 && document.querySelectorAll('#serving-table tbody tr').length === 2,
};
const pages = Object.keys(shows);
async function seesData(name) { await waitUntil(page, `(${shows[name]})()`, `page ${name} shows its data`, 15000); }

test('the page loads from the binary and shows the loaded model', async () => {
  await page.goto(URL + '/');
  await waitUntil(page, () => document.querySelector('#model-label').textContent.includes('tiny-qwen2'), 'model label');
  assert.equal(await page.title(), 'kvad');
  assert.equal(await activePage(page), 'chat');
  assert.match(page.url(), /#chat$/);
});

test('chat: a message gets a streamed answer with its stats, and the context meter counts it', async () => {
  await page.fill('#chat-max', '48');
  // A first question of more than two KV blocks (16 tokens each): the second turn must reuse at
  // least its whole blocks. What follows them (the answer, re-tokenized from its text) need not match
  // the sampled tokens, so a shorter question could share no whole block with the next prompt.
  await page.fill('#chat-input', 'Hello there, who are you? Tell me about the place where you live and what you like to do there on a long summer evening.');
  // The answer's text as it streams: a length seen before the final one means it arrived in pieces
  // (the page renders once per network read, and a busy machine can hand it several events at once).
  await page.evaluate(() => {
    window.__lengths = new Set();
    new MutationObserver(() => {
      const t = document.querySelector('.msg.streaming .text');
      if (t && t.textContent) window.__lengths.add(t.textContent.length);
    }).observe(document.querySelector('#chat-log'), { subtree: true, characterData: true, childList: true });
  });
  // Responses at ~16 KB/s (Chromium's network emulation): 48 tokens of a tiny model stream in
  // ~80 ms, which a loaded machine could hand the page as one read; throttled, the events
  // arrive over about a second, so the page must show the answer growing.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 16000, uploadThroughput: -1 });
  await page.press('#chat-input', 'Enter');
  await page.waitForSelector('.msg.user');
  await waitForAnswers(page, 1);
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  await cdp.detach();
  const answer = await page.textContent('.msg.assistant .text');
  const stats = await page.textContent('.msg.assistant .stats');
  assert.ok(answer.length > 0, 'the answer has text');
  assert.match(stats, /\d+ tokens/);
  assert.match(stats, /cached/);
  assert.match(stats, /tok\/s/);
  const pieces = await page.evaluate(() => [...window.__lengths]);
  assert.ok(pieces.length >= 2, `the answer arrived in pieces: lengths seen ${pieces}, ${stats}`);
  // "412 / 4,096 tokens": the answer's prompt + completion against the context in force (--ctx 512).
  const [, completion] = /^(\d+) tokens/.exec(stats);
  const [, prompt] = /prompt (\d+)/.exec(stats);
  assert.equal(await page.textContent('#chat-tokens'), `${Number(prompt) + Number(completion)} / 512 tokens`);
  await shot(page, 'chat');
  // A second turn reuses the cached prefix.
  await page.fill('#chat-input', 'Tell me more.');
  await page.press('#chat-input', 'Enter');
  await waitForAnswers(page, 2);
  const stats2 = await page.textContent('.msg.assistant:nth-of-type(4) .stats');
  const cached = Number(/\((\d+) cached\)/.exec(stats2)[1]);
  assert.ok(Number(prompt) >= 32, `first prompt of ${prompt} tokens`);
  assert.ok(cached > Number(prompt) - 16, `second turn cached ${cached} tokens after a first prompt of ${prompt}: ${stats2}`);
});

test('chat: Stop ends a streaming answer, which keeps what came', async () => {
  await page.click('#chat-new');
  await page.fill('#chat-max', '');  // no limit: it would run to the end of the context
  await page.fill('#chat-input', 'Talk for a long time.');
  // Stop is pressed inside the page the moment the first text shows: the tiny model fills its
  // 512 positions in a fraction of a second, which a click from here (a round trip per poll)
  // could miss, finding the answer already complete and Stop gone. The watcher is in place before
  // Enter: set up after it, it once arrived when the answer was already complete (a CI rehearsal
  // of 2026-12-06 waited its 30 s for text that had come and gone).
  await page.evaluate(() => { window.stoppedOnText = new Promise((resolve, reject) => {
    const stopOnText = () => {
      if (!(document.querySelector('.msg.streaming .text')?.textContent || '').length) return false;
      document.querySelector('#chat-stop').click();
      return true;
    };
    if (stopOnText()) return resolve();
    const seen = new MutationObserver(() => { if (stopOnText()) { seen.disconnect(); resolve(); } });
    seen.observe(document.body, { subtree: true, childList: true, characterData: true });
    setTimeout(() => { seen.disconnect(); reject(new Error('no streaming text within 30 s')); }, 30000);
  }); });
  await page.press('#chat-input', 'Enter');
  await page.evaluate(() => window.stoppedOnText);
  await waitForAnswers(page, 1);
  assert.match(await page.textContent('.msg.assistant .stats'), /stopped/);
  assert.ok(await page.isVisible('#chat-send'), 'Send is back');
  assert.ok(!(await page.isVisible('#chat-stop')), 'Stop is gone');
});

test('chat: an answer that fills the context says so in its bubble', async () => {
  await page.click('#chat-new');
  await page.fill('#chat-max', '');
  await page.fill('#chat-input', 'Go on until there is no room left.');
  await page.press('#chat-input', 'Enter');
  await waitForAnswers(page, 1, 120000);
  const note = await page.textContent('.msg.assistant .context-full');
  assert.match(note, /context is full \(512 tokens\)/);
  assert.equal(await page.textContent('#chat-tokens'), '512 / 512 tokens');
  await page.fill('#chat-max', '256');
});

test('dashboard shows live figures', async () => {
  await tab('dashboard');
  await page.waitForSelector('#dash-cards .card');
  await page.waitForTimeout(1500);
  const cards = await page.$$eval('#dash-cards .card', cs => Object.fromEntries(cs.map(c => [c.querySelector('.k').textContent, c.querySelector('.v').textContent])));
  for (const k of ['Resident memory (RSS)', 'Weights', 'KV cache held now', 'Same conversation at full context', 'KV bytes per token', 'Cached tokens, last request', 'Decode', 'Prefill'])
    assert.ok(k in cards, `card ${k}`);
  assert.match(cards['Resident memory (RSS)'], /\d+(\.\d+)? MB/);
  assert.match(cards['KV bytes per token'], /\d+(\.\d+)? (B|KB)/);
  // The card says what each kind of layer stores (MemorySpec::describe_per_token), not a formula that
  // assumes plain attention everywhere.
  const kvNote = await page.$$eval('#dash-cards .card', cs => cs.find(c => c.querySelector('.k').textContent === 'KV bytes per token').querySelector('.s').textContent);
  assert.match(kvNote, /^\d+ attention layers x \d+ KV heads x K,V x \d+ values \(\d+ B\) \((f32|bf16|q8)\)$/);
  assert.match(cards['KV cache held now'], /\d/);
  assert.notEqual(cards['Decode'], '0.0 tok/s');
  assert.match(await page.textContent('#dash-note'), /context 512 tokens \(capped from 4,096\)/);
  await shot(page, 'dashboard');
});

// Pixels of a canvas drawn in a colour: red, green, blue within 40 of it.
function colouredPixels(sel, rgb) {
  return page.$eval(sel, (c, [r, g, bl]) => {
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - r) < 40 && Math.abs(d[i + 1] - g) < 40 && Math.abs(d[i + 2] - bl) < 40) n++;
    return n;
  }, rgb);
}

test('models, scoring and benchmark pages render their figures', async () => {
  await tab('models');
  await page.waitForSelector('#models-table tbody tr.loaded');
  const loadedRow = await page.$$eval('#models-table tbody tr.loaded td', tds => tds.map(td => td.textContent));
  assert.equal(loadedRow[6], '4,096', 'the context is an exact integer');
  await shot(page, 'models');
  await tab('score');
  await page.fill('#score-text', 'The quick brown fox jumps over the lazy dog. '.repeat(4));
  await page.click('#score-form button[type=submit]');
  await waitUntil(page, () => [...document.querySelectorAll('#score-result .k')].some(k => k.textContent === 'Perplexity'), 'scoring result');
  await shot(page, 'score');
  await tab('bench');
  await page.fill('#bench-lengths', '8,32');
  await page.fill('#bench-decode', '8');
  await page.click('#bench-model-form button[type=submit]');
  await waitUntil(page, () => document.querySelectorAll('#bench-model-table tbody tr').length === 2 && !document.querySelector('#bench-model-table tbody').textContent.includes('running'), 'model benchmark rows');
  // Prefill and decode on their own charts, each with its bars drawn on its own scale.
  assert.ok(await colouredPixels('#bench-prefill-chart', [37, 99, 235]) > 100, 'prefill bars');
  assert.ok(await colouredPixels('#bench-decode-chart', [217, 142, 4]) > 100, 'decode bars are tall enough to see');
  // The serving sweep: two levels, a point per level in both charts, rows with real figures.
  await page.fill('#serving-levels', '1,2');
  await page.fill('#serving-input', '8');
  await page.fill('#serving-output', '6');
  await page.click('#serving-start');
  await waitUntil(page, () => document.querySelector('#serving-progress').textContent.startsWith('Finished'), 'serving sweep finished');
  assert.ok(!(await page.isVisible('#serving-stop')), 'Stop shows only while the sweep runs');
  assert.ok(await page.isEnabled('#serving-start'));
  const rows = await page.$$eval('#serving-table tbody tr', trs => trs.map(tr => [...tr.children].map(td => td.textContent)));
  assert.equal(rows.length, 2);
  assert.deepEqual(rows.map(r => r[0]), ['1', '2']);
  assert.deepEqual(rows.map(r => r[1]), ['4', '4']);  // 2 x the level, at least 4, none failed
  for (const r of rows) assert.ok(parseFloat(r[2]) > 0, `output tok/s ${r[2]}`);
  assert.ok(await colouredPixels('#serving-itl', [37, 99, 235]) > 20, 'the ITL chart has its points drawn');
  await shot(page, 'bench');
  assert.deepEqual(errors, []);
});

test('training: upload a text, watch the loss in bits per character, chat with the model', async () => {
  await tab('train');
  const text = 'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness. '.repeat(40);
  await page.setInputFiles('#train-file', { name: 'corpus.txt', mimeType: 'text/plain', buffer: Buffer.from(text) });
  await page.fill('#train-name', 'ui-trained');
  await page.selectOption('#train-size', 'tiny');
  await page.fill('#train-steps', '40');
  await page.click('#train-start');
  // This job's card: an earlier file's job (ui-train-lora.test.mjs) may show as finished until this one starts.
  await waitUntil(page, () => [...document.querySelectorAll('#train-cards .card')].some(c => c.querySelector('.k').textContent.endsWith(': ui-trained')
    && c.querySelector('.v')?.textContent === 'finished'), 'training finished', 120000);
  assert.ok((await page.$$('#train-samples .sample')).length >= 1, 'a sample at a checkpoint');
  assert.match(await page.textContent('#train-log'), /val loss/);
  // One unit for loss: the train loss card is the job's last loss (nats) in bits per character.
  const job = await page.evaluate(() => kvad.get('/kvad/train').then(t => t.current));
  const cards = await page.$$eval('#train-cards .card', cs => Object.fromEntries(cs.map(c => [c.querySelector('.k').textContent, c.querySelector('.v')?.textContent])));
  assert.equal(cards['Train loss'], `${(job.last_loss / Math.LN2).toFixed(3)} bpc`);
  assert.match(cards['Validation loss'], /^\d+\.\d{3} bpc$/);
  assert.doesNotMatch(await page.textContent('#page-train'), /nats/);
  await shot(page, 'train');
  // "Chat with it" loads the trained model and opens the chat.
  await page.click('#train-chat');
  await waitForPage(page, 'chat');
  await waitUntil(page, () => document.querySelector('#model-label').textContent.startsWith('ui-trained'), 'trained model loaded');
  await page.click('#chat-new');
  await page.fill('#chat-input', 'It was the');
  await page.press('#chat-input', 'Enter');
  await waitForAnswers(page, 1);
  assert.deepEqual(errors, []);
});

test('models: a trained model counts its weights only, and "Chat with it" loads another model', async () => {
  await tab('models');
  await waitUntil(page, () => document.querySelector('#models-table').textContent.includes('ui-trained'), 'trained model listed');
  const trained = await page.$$eval('#models-table tbody tr', trs => trs.map(tr => [...tr.children].map(td => td.textContent))
    .find(r => r[0].startsWith('ui-trained')));
  const dir = path.join(process.env.KVAD_HOME, 'models', 'ui-trained');
  assert.ok(fs.existsSync(path.join(dir, 'optimizer.safetensors')), 'the trainer kept its optimizer state beside the weights');
  const weights = fs.statSync(path.join(dir, 'model.safetensors')).size;
  const [, num, unit] = /^([\d.]+) (B|KB|MB)$/.exec(trained[4]);
  const shown = Number(num) * { B: 1, KB: 1e3, MB: 1e6 }[unit];
  assert.ok(Math.abs(shown - weights) / weights < 0.02, `size ${trained[4]} is the weights' ${weights} bytes`);
  const row = page.locator('#models-table tbody tr', { hasText: 'tiny-qwen2' });
  await row.locator('button.chat-with').click();
  await waitForPage(page, 'chat');
  await waitUntil(page, () => document.querySelector('#model-label').textContent.startsWith('tiny-qwen2'), 'tiny-qwen2 loaded again');
});

test('a load in progress: the toast says how far it has got, then that it loaded', async () => {
  await tab('models');
  // The server's real figures are checked in tests/serve_server.cpp (ALoadsProgressIsReadableWhileItRuns);
  // here its answer is fixed and the load request held back, so the page polls while it waits.
  const progress = { name: 'm', stage: 'reading the checkpoint, to q8', done: 152, total: 339, unit: 'tensors' };
  await page.route('**/kvad/models/loading', r => r.fulfill({ json: progress }));
  await page.route('**/kvad/models/load', async r => { await new Promise(f => setTimeout(f, 2000)); await r.continue(); });
  try {
    const loaded = page.evaluate(() => loadModel(kvad.info.model.name));
    await waitUntil(page, () => document.querySelector('#toast').textContent.endsWith('reading the checkpoint, to q8: 44% (152 of 339 tensors)'),
                    'the progress in the toast', 10000);
    assert.equal(await loaded, true);
    await new Promise(f => setTimeout(f, 700));  // past the next poll: it must not bring the progress back
    assert.match(await page.textContent('#toast'), /^Loaded /);
  } finally {
    await page.unroute('**/kvad/models/loading');
    await page.unroute('**/kvad/models/load');
  }
  assert.deepEqual(errors, []);
});

test('every page: typed address, reload and Back show it with its data', async () => {
  for (const p of pages) {
    await page.goto(`${URL}/#${p}`);  // typing the address: the same document, a new #page
    await waitForPage(page, p);
    await seesData(p);
    await page.reload();
    await waitForPage(page, p);
    await seesData(p);
  }
  // Tabs make history entries: Back walks back through them without leaving the app.
  await tab('chat');
  await tab('models');
  await tab('dashboard');
  await page.goBack();
  await waitForPage(page, 'models');
  await seesData('models');
  await page.goBack();
  await waitForPage(page, 'chat');
  await page.goForward();
  await waitForPage(page, 'models');
  assert.match(page.url(), /#models$/);
  assert.deepEqual(errors, []);
});

test('a phone (390 px): no page scrolls sideways, every tab is reachable, the chat answers', async () => {
  await page.setViewportSize({ width: 390, height: 844 });
  try {
    for (const p of pages) {
      await tab(p);  // Playwright scrolls the tab into view first, as a thumb would
      await waitForPage(page, p);
      await seesData(p);
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(width <= 390, `page ${p} is ${width} px wide`);
      await shot(page, `phone-${p}`);
    }
    // The Models table keeps each row's buttons on screen (its minor columns fold into the name).
    await tab('models');
    await waitForPage(page, 'models');
    const right = await page.$$eval('#models-table button.chat-with', bs => bs.map(b => b.getBoundingClientRect().right));
    assert.ok(right.length > 0 && right.every(x => x <= 390), `"Chat with it" buttons end at ${right} px`);
    await tab('chat');
    await page.click('#chat-new');
    await page.fill('#chat-input', 'Hi from a phone');
    await page.click('#chat-send');
    await waitForAnswers(page, 1);
    assert.ok(await page.isVisible('#chat-input'));
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= 390);
  } finally {
    await page.setViewportSize({ width: 1280, height: 860 });
  }
  // Back on a wide window, the charts drawn at phone width fill their columns again.
  await tab('dashboard');
  await waitForPage(page, 'dashboard');
  await waitUntil(page, () => document.querySelector('#dash-mem').getBoundingClientRect().width > 450, 'the memory chart widens');
  const [css, store] = await page.evaluate(() => { const c = document.querySelector('#dash-mem'); return [c.clientWidth, c.width / devicePixelRatio]; });
  assert.ok(Math.abs(css - store) <= 2, `the chart is drawn at its width (${store} for ${css} px)`);
});

test('dark mode follows the system', async () => {
  const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  const ink = () => page.evaluate(() => getComputedStyle(document.body).color);
  await page.emulateMedia({ colorScheme: 'light' });
  const light = [await background(), await ink()];
  await page.emulateMedia({ colorScheme: 'dark' });
  const dark = [await background(), await ink()];
  for (const p of ['chat', 'dashboard']) {
    await tab(p);
    await waitForPage(page, p);
    await shot(page, `dark-${p}`);
  }
  await page.emulateMedia({ colorScheme: 'light' });
  assert.notEqual(dark[0], light[0], 'the background changes');
  assert.notEqual(dark[1], light[1], 'so does the text');
  const lum = c => { const [r, g, bl] = c.match(/\d+/g).map(Number); return 0.2126 * r + 0.7152 * g + 0.0722 * bl; };
  assert.ok(lum(dark[0]) < 60 && lum(dark[1]) > 180, `dark: ${dark}`);
});
