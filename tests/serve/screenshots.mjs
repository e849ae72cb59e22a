// Screenshots of every page of a running kvad serve, one a page, for looking at the UI:
//   node tests/serve/screenshots.mjs http://127.0.0.1:8080 /tmp/kvad-shots [API_KEY] [WIDTHxHEIGHT] [dark]
import fs from 'node:fs';
import { launch } from './browser.mjs';

const [url = 'http://127.0.0.1:8080', out = 'kvad-screenshots', key = '', size = '1280x860', scheme = 'light'] = process.argv.slice(2);
const [width, height] = size.split('x').map(Number);
fs.mkdirSync(out, { recursive: true });
const b = await launch({ width, height });
const page = await b.newPage();
await page.emulateMedia({ colorScheme: scheme === 'dark' ? 'dark' : 'light' });
if (key) await page.addInitScript(k => localStorage.setItem('kvad_api_key', k), key);
for (const p of ['chat', 'models', 'dashboard', 'train', 'score', 'bench']) {
  await page.goto(`${url}/#${p}`);  // a typed address: the page switches on hashchange
  await page.waitForFunction(n => document.querySelector('.page.active')?.id === 'page-' + n, p, { timeout: 10000 });
  await page.waitForTimeout(1500);  // its data loads
  await page.screenshot({ path: `${out}/${p}.png`, fullPage: true });
  console.log(`${out}/${p}.png`);
}
await b.close();
