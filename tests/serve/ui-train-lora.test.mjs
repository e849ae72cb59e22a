// The Training page's LoRA mode in headless Chromium: fine-tune an adapter for the loaded model
// (a model from the Models list), watch the base's step-0 figure beside the adapter's, and "Use in
// chat" opens the chat with the new adapter chosen in its picker.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { URL, openBrowser, waitUntil, waitForPage, waitForAnswers } from './ui-lib.mjs';

let b, page, errors;
before(async () => ({ b, page, errors } = await openBrowser()));
after(async () => { if (b) await b.close(); });

const BASE = process.env.MODEL;  // the tiny model the server was started with (run.sh)

test('training: fine-tune a LoRA adapter on a model from Models, then chat with it', async () => {
  await page.goto(URL + '/#train');
  await waitForPage(page, 'train');
  // Its adapter joins the chat when its base is the loaded model: an earlier file loaded another.
  assert.ok(await page.evaluate(name => loadModel(name), BASE), 'the base loads');
  await page.check('#train-mode-lora');
  await waitUntil(page, name => [...document.querySelectorAll('#train-base option')].some(o => o.value === name), 'the base in the picker', 10000, BASE);
  assert.ok(await page.isHidden('#train-size'), 'the scratch-only fields are hidden');
  await page.selectOption('#train-base', BASE);
  await page.fill('#train-name', 'ui-adapter');
  await page.fill('#train-text', 'Once upon a time there was a little model that learned to talk about the sea and the sky. '.repeat(20));
  await page.fill('#train-rank', '4');
  await page.fill('#train-steps', '12');
  await page.fill('#train-batch', '4');
  await page.fill('#train-context', '32');
  await page.fill('#train-targets', 'q_proj,v_proj');
  await page.fill('#train-lr', '0.002');
  await page.check('#train-rslora');
  await page.click('#train-start');
  await waitUntil(page, () => !!document.querySelector('#train-use-adapter'), 'the job finished with its adapter loaded', 120000);

  const job = await page.evaluate(() => kvad.get('/kvad/train').then(t => t.current));
  assert.equal(job.name, 'ui-adapter');
  assert.equal(job.kind, 'lora');
  assert.equal(job.state, 'finished');
  assert.equal(job.params.targets, 'q_proj,v_proj', "the form's modules reach kvad train");
  assert.equal(job.params.lr, 0.002);
  assert.equal(job.params.rslora, true);
  assert.match(await page.textContent('#train-cards'), /\(q_proj,v_proj\), rsLoRA/);
  assert.equal(job.val[0][0], 0, "the base's own validation point first");
  const cards = await page.$$eval('#train-cards .card', cs => Object.fromEntries(cs.map(c => [c.querySelector('.k').textContent, c.querySelector('.v')?.textContent])));
  assert.equal(cards['The base (step 0)'], `${job.val[0][2].toFixed(3)} bpc`);
  assert.match(cards['Finished'], /^\d+\.\d{3} bpc$/);
  await waitUntil(page, () => document.querySelector('#train-adapters tbody').textContent.includes('ui-adapter'), 'the store lists the adapter');

  // "Use in chat": the chat's picker offers the adapter and has it chosen.
  await page.click('#train-use-adapter');
  await waitForPage(page, 'chat');
  await waitUntil(page, id => !document.querySelector('#chat-lora-box').hidden && document.querySelector('#chat-lora').value === String(id)
    && document.querySelector('#chat-lora').selectedOptions[0].textContent.startsWith('ui-adapter'), 'the adapter chosen in the picker', 10000, job.adapter.id);
  const sent = page.waitForRequest(r => r.url().endsWith('/v1/chat/completions'));
  await page.click('#chat-new');
  await page.fill('#chat-input', 'Once upon a time');
  await page.press('#chat-input', 'Enter');
  assert.deepEqual(JSON.parse((await sent).postData()).lora, [{ id: job.adapter.id, scale: 1 }]);
  await waitForAnswers(page, 1);
  assert.deepEqual(errors, []);
});
