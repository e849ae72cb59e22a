// What the UI tests share: a browser page on the server under test, waiting with a useful error,
// and reading what the page shows.
import fs from 'node:fs';
import { launch } from './browser.mjs';

export const URL = process.env.KVAD_URL;
export const SHOTS = process.env.SHOTS;

// A fresh browser (its own profile: nothing kept from another test file) with one page whose
// script errors are collected in `errors`.
export async function openBrowser() {
  const b = await launch();
  const page = await b.newPage();
  const errors = [];
  page.on('pageerror', e => errors.push(String(e)));
  page.on('console', m => { if (m.type() === 'error') errors.push(m.text()); });
  if (SHOTS) fs.mkdirSync(SHOTS, { recursive: true });
  return { b, page, errors };
}

// Waits for fn in the page; on a timeout the error says what the page showed (toast, section text).
export async function waitUntil(page, fn, what, timeout = 60000, arg = null) {
  try {
    await page.waitForFunction(fn, arg, { timeout });
  } catch (e) {
    const toast = await page.textContent('#toast').catch(() => '');
    const section = await page.textContent('.page.active').catch(() => '');
    throw new Error(`${what}: ${e.message}\ntoast: ${toast}\npage: ${section.replace(/\s+/g, ' ').slice(0, 600)}`);
  }
}

// The page the UI shows now (the id of the active section, without "page-").
export function activePage(page) {
  return page.$eval('.page.active', s => s.id.replace(/^page-/, ''));
}

export async function waitForPage(page, name) {
  await waitUntil(page, n => document.querySelector('.page.active')?.id === 'page-' + n, `page ${name} shown`, 10000, name);
}

// The conversations the page keeps in localStorage (web/conversations.js describes the shape).
export function storedConversations(page) {
  return page.evaluate(() => JSON.parse(localStorage.getItem('kvad_conversations')));
}

// Waits until the chat has n answers with their stats line (finished).
export async function waitForAnswers(page, n, timeout = 60000) {
  await waitUntil(page, k => document.querySelectorAll('#chat-log .msg.assistant .stats').length === k && !document.querySelector('.msg.streaming'),
    `${n} finished answers`, timeout, n);
}

// One screenshot per page, named after it (a prefix such as "phone-" or "dark-" for a variant); it
// must show that page (navigation once left every screenshot on the Chat page).
export async function shot(page, name) {
  if (!SHOTS) return;
  const want = name.replace(/^(phone|dark)-/, '');
  if ((await activePage(page)) !== want) throw new Error(`screenshot ${name}: the page shows ${await activePage(page)}`);
  await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
}
