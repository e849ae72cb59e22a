// Load test (loopback only, bounded): N concurrent streaming clients for S seconds against one
// server. Passes when nothing crashes or hangs, every request is answered 200 (16 clients are within
// --parallel + --queue, so a 429 here is a failure), memory is flat afterwards, and every KV block
// is back in the pool (none leaked).
//   node load.mjs CLIENTS SECONDS   (KVAD_URL set)
import http from 'node:http';

const URL_ = new URL(process.env.KVAD_URL);
const clients = Number(process.argv[2] || 16), seconds = Number(process.argv[3] || 60);
const agent = new http.Agent({ keepAlive: true, maxSockets: clients });

function request(method, path, body, onData) {
  return new Promise((resolve, reject) => {
    const data = body ? JSON.stringify(body) : null;
    const req = http.request({ host: URL_.hostname, port: URL_.port, method, path, agent,
      headers: data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {} }, res => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', d => { text += d; if (onData) onData(d); });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
      res.on('error', reject);
    });
    req.setTimeout(30000, () => req.destroy(new Error('request hung for 30 s')));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

async function rss() {
  const r = await request('GET', '/metrics');
  return Number(/^kvad_resident_memory_bytes (\d+(\.\d+)?(e\+\d+)?)/m.exec(r.text)[1]);
}
const pct = (v, p) => { if (!v.length) return 0; const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))]; };

// Warm up so the KV caches have grown to their working size before memory is measured.
for (let i = 0; i < 6; i++)
  await request('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: `warm up ${i}` }], max_tokens: 48, seed: i });
const rssBefore = await rss();

const counts = { 200: 0, 429: 0 }, bad = [], ttft = [], total = [];
let tokens = 0, retryAfterMissing = 0;
const t0 = Date.now();
async function client(k) {
  let n = 0;
  while (Date.now() - t0 < seconds * 1000) {
    const start = Date.now();
    let first = 0;
    const stream = n % 2 === 0;
    const body = { messages: [{ role: 'user', content: `client ${k} request ${n}: tell me something` }], max_tokens: 24 + (n % 3) * 8, seed: k * 1000 + n, stream };
    if (stream) body.stream_options = { include_usage: true };
    n++;
    try {
      // Time to first token: the first chunk with text (the role chunk comes before any token).
      const r = await request('POST', '/v1/chat/completions', body, d => { if (!first && /"content":"[^"]/.test(d)) first = Date.now(); });
      if (r.status === 200) {
        counts[200]++;
        total.push(Date.now() - start);
        if (stream) {
          if (!r.text.trimEnd().endsWith('data: [DONE]')) bad.push(`stream without [DONE]: ${r.text.slice(-200)}`);
          if (first) ttft.push(first - start);
          const u = /"usage":\{"prompt_tokens":\d+,"completion_tokens":(\d+)/.exec(r.text);
          if (u) tokens += Number(u[1]);
        } else {
          tokens += JSON.parse(r.text).usage.completion_tokens;
        }
      } else if (r.status === 429) {
        counts[429]++;
        if (!r.headers['retry-after']) retryAfterMissing++;
        await new Promise(res => setTimeout(res, 50 + Math.random() * 150));
      } else {
        bad.push(`HTTP ${r.status}: ${r.text.slice(0, 200)}`);
      }
    } catch (e) {
      bad.push(`client ${k}: ${e.message}`);
    }
  }
}
await Promise.all(Array.from({ length: clients }, (_, k) => client(k)));
const elapsed = (Date.now() - t0) / 1000;

// Afterwards: the server answers at once, and memory is flat (no growth beyond allocator noise).
const health = await request('GET', '/health');
await new Promise(res => setTimeout(res, 500));
const rssAfter = await rss();
const growth = rssAfter - rssBefore;
const report = {
  clients, seconds: elapsed, ok: counts[200], busy: counts[429], failures: bad.length,
  tokens, tokens_per_s: +(tokens / elapsed).toFixed(1),
  ttft_ms: { p50: pct(ttft, 50), p90: pct(ttft, 90), p99: pct(ttft, 99) },
  latency_ms: { p50: pct(total, 50), p90: pct(total, 90), p99: pct(total, 99) },
  rss_mb: { before: +(rssBefore / 1e6).toFixed(1), after: +(rssAfter / 1e6).toFixed(1), growth: +(growth / 1e6).toFixed(1) },
};
const problems = [...bad.slice(0, 10)];
if (health.status !== 200) problems.push(`/health answered ${health.status} after the run`);
if (counts[200] < clients) problems.push(`only ${counts[200]} requests served in ${elapsed} s`);
if (retryAfterMissing) problems.push(`${retryAfterMissing} 429s without Retry-After`);
if (counts[429]) problems.push(`${counts[429]} requests refused with 429 although ${clients} clients are within --parallel + --queue`);
const stats = JSON.parse((await request('GET', '/kvad/stats')).text);
report.kv_blocks = stats.kv_blocks;
if (stats.kv_blocks.used !== 0 || stats.engine.running !== 0) problems.push(`after the run ${stats.kv_blocks.used} KV blocks are still held`);
if (growth > Math.max(32e6, 0.25 * rssBefore)) problems.push(`memory grew by ${(growth / 1e6).toFixed(1)} MB`);
console.log(JSON.stringify(report, null, 1));
for (const p of problems) console.log('FAIL ' + p);
console.log(`${problems.length ? 0 : 1} passed, ${problems.length ? 1 : 0} failed`);
agent.destroy();
process.exit(problems.length ? 1 : 0);
