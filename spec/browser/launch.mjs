// Debian's Chromium (/usr/bin/chromium), headless, with a fresh profile and nothing that calls
// home: for the viewer's browser spec and bench/view_bench.lua. Returns {ctx, page, close}.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export async function launch(opts = {}) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'cseng-view-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium', headless: true, args: FLAGS, viewport: opts.viewport || { width: 1400, height: 900 },
  });
  const page = ctx.pages()[0] || await ctx.newPage();
  const close = async () => { await ctx.close(); fs.rmSync(profile, { recursive: true, force: true }); };
  return { ctx, page, close };
}
