// The Images page in headless Chromium: paint with the server's tiny SD 1.5 pipeline, watch the
// progress bar and preview, find the image in the gallery with its parameters, reuse its seed; a
// size the model cannot make is held by the form, an empty prompt said.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { URL, openBrowser, waitUntil, waitForPage, shot } from './ui-lib.mjs';

let b, page, errors;
before(async () => ({ b, page, errors } = await openBrowser()));
after(async () => { if (b) await b.close(); });

test('images: paint, see progress and the finished image with its seed, reuse the seed', async () => {
  await page.goto(URL + '/#images');
  await waitForPage(page, 'images');
  await waitUntil(page, () => [...document.querySelectorAll('#images-model option')].some(o => o.value === 'sd15-tiny'), 'the image model listed', 10000);
  assert.ok(await page.isHidden('#images-none'), 'no "no image model" notice');
  assert.equal(await page.inputValue('#images-width'), '128', "the model's own size is the default");
  assert.equal(await page.getAttribute('#images-width', 'step'), '64');
  await page.fill('#images-prompt', 'a red fox in fresh snow');
  await page.fill('#images-steps', '6');
  await page.fill('#images-seed', '5');
  await page.click('#images-start');
  await waitUntil(page, () => document.querySelectorAll('#images-gallery figure').length === 1, 'the painted image in the gallery', 60000);
  // The image and the end of the stream are two events (png, then done): on a loaded machine the
  // second can come a moment after the gallery shows the first.
  await waitUntil(page, () => document.querySelector('#images-status').textContent === 'Done', 'the status saying Done', 10000);
  assert.equal(await page.$eval('#images-bar', p => p.value), 1);
  assert.match(await page.getAttribute('#images-preview', 'src'), /^data:image\/png;base64,/, 'a preview was shown');
  const img = await page.$eval('#images-gallery img', i => ({ w: i.naturalWidth, h: i.naturalHeight, src: i.src }));
  assert.deepEqual([img.w, img.h], [128, 128]);
  assert.match(await page.textContent('#images-gallery figcaption'), /a red fox in fresh snow — 128×128, seed 5\s*Steps: 6, Sampler: Euler, CFG scale: 7.5, Seed: 5, Size: 128x128, Model: sd15-tiny/);
  assert.equal(await page.getAttribute('#images-gallery a', 'download'), 'kvad-5.png');
  await shot(page, 'images');

  // A random seed, then "Use seed" puts it back in the form; painting again gives the same pixels.
  await page.fill('#images-seed', '');
  await page.click('#images-start');
  await waitUntil(page, () => document.querySelectorAll('#images-gallery figure').length === 2, 'a second image', 60000);
  const caption = await page.textContent('#images-gallery figure:first-child figcaption');
  const seed = caption.match(/seed (\d+)/)[1];
  await page.click('#images-gallery figure:first-child button');
  assert.equal(await page.inputValue('#images-seed'), seed);
  const firstSrc = await page.$eval('#images-gallery figure:first-child img', i => i.src);
  await page.click('#images-start');
  await waitUntil(page, () => document.querySelectorAll('#images-gallery figure').length === 3, 'a third image', 60000);
  assert.equal(await page.$eval('#images-gallery figure:first-child img', i => i.src), firstSrc, 'the same seed paints the same image');

  // The gallery is the server's: a reload shows the same three images, newest first.
  const before = await page.$$eval('#images-gallery figure', fs => fs.map(f => f.dataset.id));
  await page.reload();
  await waitForPage(page, 'images');
  await waitUntil(page, n => document.querySelectorAll('#images-gallery figure img').length === n &&
    [...document.querySelectorAll('#images-gallery img')].every(i => i.complete && i.naturalWidth === 128), 'the gallery after a reload', 10000, before.length);
  assert.deepEqual(await page.$$eval('#images-gallery figure', fs => fs.map(f => f.dataset.id)), before);

  // A size the model cannot make is held by the form itself (the width steps by the model's 64),
  // and an empty prompt is said in a toast; nothing is painted.
  await page.fill('#images-width', '100');
  await page.click('#images-start');
  assert.equal(await page.$eval('#images-width', i => i.validity.stepMismatch), true);
  await page.fill('#images-width', '128');
  await page.fill('#images-prompt', '   ');
  await page.click('#images-start');
  await waitUntil(page, () => /Write what to paint/.test(document.querySelector('#toast').textContent), 'the empty prompt said', 10000);
  assert.equal(await page.$$eval('#images-gallery figure', f => f.length), 3);
  assert.deepEqual(errors, []);
});
