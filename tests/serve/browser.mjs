// Debian's Chromium driven by playwright-core (no downloaded browser: `npx playwright install`
// cannot work offline, and the system one is what users have). A fresh profile each time.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export async function launch(viewport = { width: 1280, height: 860 }) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'kvad-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport,
    // Playwright's waitForFunction runs its predicate through new Function, which the UI's CSP
    // (script-src 'self', no eval) forbids; the CSP itself is checked by tests/serve_hardening.cpp.
    bypassCSP: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const close = async () => { await context.close(); fs.rmSync(profile, { recursive: true, force: true }); };
  return { context, close, newPage: () => context.newPage() };
}
