// Screenshots of every page of a running kvad serve, for looking at the UI:
//   node tests/serve/screenshots.mjs http://127.0.0.1:8080 /tmp/kvad-shots [API_KEY]
import fs from 'node:fs';
import { launch } from './browser.mjs';

const [url = 'http://127.0.0.1:8080', out = 'kvad-screenshots', key = ''] = process.argv.slice(2);
fs.mkdirSync(out, { recursive: true });
const b = await launch();
const page = await b.newPage();
if (key) await page.addInitScript(k => localStorage.setItem('kvad_api_key', k), key);
for (const p of ['chat', 'models', 'dashboard', 'train', 'score', 'bench']) {
  await page.goto(`${url}/#${p}`);
  await page.waitForTimeout(1500);
  await page.screenshot({ path: `${out}/${p}.png`, fullPage: true });
  console.log(`${out}/${p}.png`);
}
await b.close();
