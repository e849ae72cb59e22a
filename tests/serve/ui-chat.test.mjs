// The chat page's features in headless Chromium: answers as sanitised Markdown (model output never
// runs), conversations kept across reloads with a list to switch and delete, regenerate / edit /
// copy, and every sampler setting sent and kept.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { URL, openBrowser, waitUntil, waitForAnswers, storedConversations } from './ui-lib.mjs';

let b, page, errors;
const sent = [];  // the bodies of the chat requests the page made
before(async () => {
  ({ b, page, errors } = await openBrowser());
  await b.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: URL });
  page.on('request', r => { if (r.url().endsWith('/v1/chat/completions')) sent.push(r.postDataJSON()); });
  await page.goto(URL + '/#chat');
  await waitUntil(page, () => document.querySelector('#model-label').textContent.includes('tiny-qwen2'), 'model label');
});
after(async () => { if (b) await b.close(); });

async function send(text, answers) {
  await page.fill('#chat-input', text);
  await page.press('#chat-input', 'Enter');
  await waitForAnswers(page, answers);
}

// An answer holding markup that would run if the page trusted it, beside Markdown that must render.
const hostile = [
  'Here is **bold** and <img src=x onerror="window.__pwned = 1">',
  ' then <script>window.__pwned = 2</script><a href="javascript:window.__pwned=3" id="jslink">a link</a>',
  ' <svg><animate onbegin="window.__pwned = 4" attributeName="x" dur="1s"></animate></svg>',
  '\n\n```js\nconst x = 1;\n```\n\n[raw](javascript:window.__pwned=5)',
];

async function checkSanitised(where) {
  const bubble = '#chat-log .msg.assistant .text';
  assert.equal(await page.textContent(`${bubble} strong`), 'bold', `${where}: **bold** is <strong>`);
  assert.equal(await page.textContent(`${bubble} pre code`), 'const x = 1;\n', `${where}: the code block is <pre><code>`);
  assert.equal(await page.$$eval('#chat-log img, #chat-log script, #chat-log animate', e => e.length), 0, `${where}: no img, script or animate`);
  const hrefs = await page.$$eval(`${bubble} a`, as => as.map(a => a.getAttribute('href')));
  assert.ok(hrefs.every(h => !h || !/^javascript:/i.test(h)), `${where}: no javascript: links (${hrefs})`);
  await page.click('#jslink', { timeout: 2000 }).catch(() => {});  // even clicked, nothing runs
  await page.waitForTimeout(1200);  // the animation's begin, had it survived
  assert.equal(await page.evaluate(() => window.__pwned), undefined, `${where}: none of it ran`);
}

test('a streamed answer renders as Markdown and none of its HTML runs; the context-full detail shows', async () => {
  // The tiny model writes no Markdown, so this answer comes from a stand-in for the server's
  // stream: the same SSE chunks, HTML split across them, the last one saying the context is full.
  const chunk = o => `data: ${JSON.stringify(o)}\n\n`;
  const body = hostile.map(t => chunk({ choices: [{ index: 0, delta: { content: t }, finish_reason: null }] })).join('') +
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'length', finish_details: { type: 'context_full', context_length: 512 } }] }) +
    chunk({ choices: [], usage: { prompt_tokens: 500, completion_tokens: 12, prompt_tokens_details: { cached_tokens: 0 } } }) +
    'data: [DONE]\n\n';
  await page.route('**/v1/chat/completions', r => r.fulfill({ status: 200, contentType: 'text/event-stream', body }));
  try {
    await page.click('#chat-new');
    await send('Show me some formatting **please** <b>now</b>', 1);
  } finally {
    await page.unroute('**/v1/chat/completions');
  }
  await checkSanitised('streamed');
  // The user's own text is text: asterisks and tags shown as typed.
  assert.equal(await page.textContent('#chat-log .msg.user .text'), 'Show me some formatting **please** <b>now</b>');
  assert.equal(await page.$$eval('#chat-log .msg.user strong, #chat-log .msg.user b', e => e.length), 0);
  assert.match(await page.textContent('.msg.assistant .context-full'), /context is full \(512 tokens\)/);
  assert.match(await page.textContent('.msg.assistant .stats'), /context full/);
  assert.equal(await page.textContent('#chat-tokens'), '512 / 512 tokens');
  // After a reload the stored answer goes through the same renderer.
  await page.reload();
  await waitForAnswers(page, 1);
  await checkSanitised('reloaded');
  assert.match(await page.textContent('.msg.assistant .context-full'), /512 tokens/);
});

test('a conversation saved by an earlier visit renders sanitised', async () => {
  // What localStorage holds (web/conversations.js), written as another visit would have left it.
  await page.evaluate(content => {
    const saved = JSON.parse(localStorage.getItem('kvad_conversations'));
    saved.list.unshift({ id: 'saved1', title: 'saved', system: '', updated: Date.now(),
      messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content, meta: { stats: '12 tokens' } }] });
    saved.current = 'saved1';
    localStorage.setItem('kvad_conversations', JSON.stringify(saved));
  }, hostile.join(''));
  await page.reload();
  await waitForAnswers(page, 1);
  await checkSanitised('saved');
});

test('conversations survive a reload and can be switched and deleted', async () => {
  await page.click('#chat-new');
  await send('first conversation', 1);
  await page.click('#chat-new');
  await send('second conversation', 1);
  await page.reload();
  await waitForAnswers(page, 1);
  assert.equal(await page.textContent('#chat-log .msg.user .text'), 'second conversation', 'the current one is shown again');
  const titles = await page.$$eval('#conv-list .conv-open', bs => bs.map(b => b.title));
  assert.deepEqual(titles.slice(0, 2), ['second conversation', 'first conversation'], 'newest first');
  await page.click('#conv-list .conv-open[title="first conversation"]');
  assert.equal(await page.textContent('#chat-log .msg.user .text'), 'first conversation');
  // The history went back to the server whole: a turn in the old conversation reuses its prefix.
  await send('and more', 2);
  assert.deepEqual(sent.at(-1).messages.map(m => m.content).filter((_, i) => i !== 1), ['first conversation', 'and more']);
  page.once('dialog', d => d.accept());
  await page.click('#conv-list li:has(.conv-open[title="second conversation"]) .conv-delete');
  await page.reload();
  await waitForAnswers(page, 2);
  const after = await page.$$eval('#conv-list .conv-open', bs => bs.map(b => b.title));
  assert.ok(!after.includes('second conversation') && after.includes('first conversation'), `after deleting: ${after}`);
  assert.equal((await storedConversations(page)).list.filter(c => c.title === 'second conversation').length, 0);
});

test('regenerate the last answer, edit a question (drops what followed), copy an answer', async () => {
  await page.click('#chat-new');
  await page.fill('#chat-temp', '1');
  await page.fill('#chat-seed', '7');
  await page.fill('#chat-max', '12');
  await send('Tell me a story', 1);
  const first = await page.textContent('.msg.assistant .text');
  const before = sent.length;
  // The same seed gives the same answer: the request really went again with the same settings.
  await page.click('.msg.assistant .act-regenerate');  // the old answer goes at once, a new one streams
  await waitForAnswers(page, 1);
  assert.equal(sent.length, before + 1, 'one more request');
  assert.deepEqual(sent.at(-1).messages, sent.at(-2).messages, 'the same conversation was sent');
  assert.equal(await page.textContent('.msg.assistant .text'), first);
  assert.equal((await page.$$('#chat-log .msg')).length, 2);
  // Regenerate is offered on the last answer only.
  await send('And then?', 2);
  assert.equal(await page.$$eval('.act-regenerate', bs => bs.length), 1);
  assert.equal(await page.getAttribute('.msg.assistant:last-child', 'data-index'), '3');
  // Copy puts the answer's text on the clipboard.
  const stored = (await storedConversations(page)).list[0].messages;
  await page.click('.msg.assistant:last-child .act-copy');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), stored[3].content);
  // Editing the first question resends it and drops the turns after it.
  await page.click('.msg.user[data-index="0"] .act-edit');
  await page.fill('.msg.user .edit-text', 'Tell me a poem instead');
  await page.click('.msg.user .act-resend');
  await waitForAnswers(page, 1);
  const texts = await page.$$eval('#chat-log .msg .text', ts => ts.map(t => t.textContent));
  assert.equal(texts.length, 2);
  assert.equal(texts[0], 'Tell me a poem instead');
  assert.deepEqual(sent.at(-1).messages.map(m => m.content), ['Tell me a poem instead']);
  assert.equal((await storedConversations(page)).list[0].messages.length, 2);
});

test('every sampler setting is sent as the API names it, and kept across a reload', async () => {
  const settings = {
    '#chat-temp': ['0.5', 'temperature', 0.5], '#chat-max': ['20', 'max_tokens', 20], '#chat-top-p': ['0.9', 'top_p', 0.9],
    '#chat-top-k': ['40', 'top_k', 40], '#chat-min-p': ['0.05', 'min_p', 0.05], '#chat-presence': ['0.5', 'presence_penalty', 0.5],
    '#chat-frequency': ['0.25', 'frequency_penalty', 0.25], '#chat-repetition': ['1.1', 'repetition_penalty', 1.1],
    '#chat-seed': ['42', 'seed', 42],
  };
  for (const [sel, [v]] of Object.entries(settings)) await page.fill(sel, v);
  await page.fill('#chat-stops', 'END\n\\n\\n');
  await page.click('#chat-new');
  await send('Settings check', 1);
  assert.ok(!(await page.$('.msg.assistant.error')), 'the server took them all');
  const body = sent.at(-1);
  for (const [, [, key, want]] of Object.entries(settings)) assert.equal(body[key], want, key);
  assert.deepEqual(body.stop, ['END', '\n\n']);
  await page.reload();
  await page.waitForSelector('#chat-top-k');
  for (const [sel, [v]] of Object.entries(settings)) assert.equal(await page.inputValue(sel), v, `${sel} kept`);
  // An empty field is not sent (the server's default applies); a value the API refuses is not sent at all.
  await page.fill('#chat-top-k', '');
  await page.fill('#chat-stops', '');
  await send('Defaults check', 2);
  assert.ok(!('top_k' in sent.at(-1)) && !('stop' in sent.at(-1)), JSON.stringify(sent.at(-1)));
  const count = sent.length;
  await page.fill('#chat-top-p', '5');
  await page.fill('#chat-input', 'not sent');
  await page.press('#chat-input', 'Enter');
  await waitUntil(page, () => /Top-p must be/.test(document.querySelector('#toast').textContent), 'the fault is said');
  assert.equal(sent.length, count, 'no request');
  assert.equal(await page.inputValue('#chat-input'), 'not sent', 'the message is kept to send again');
  await page.click('#sampler-reset');
  assert.equal(await page.inputValue('#chat-top-p'), '');
  assert.equal(await page.inputValue('#chat-temp'), '0.7');
  assert.deepEqual(errors, []);
});
