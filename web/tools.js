// Training (not yet available), Scoring and Benchmark pages.
'use strict';

// ---- Training
async function renderTrain() {
  try {
    const t = await kvad.get('/api/train');
    $('#train-unavailable').classList.toggle('hidden', t.available);
    $('#train-reason').textContent = t.available ? '' : t.reason + '.';
  } catch (e) { toast(e.message, true); }
}

// ---- Scoring
async function runScore(ev) {
  ev.preventDefault();
  const text = $('#score-text').value;
  if (!text.trim()) { toast('Paste a text or choose a file first.', true); return; }
  const out = $('#score-result');
  out.innerHTML = '';
  out.append(card('Scoring…', '…'));
  try {
    const r = await kvad.post('/api/score', {text, window: parseInt($('#score-window').value, 10) || 0});
    out.innerHTML = '';
    out.append(
      card('Perplexity', fmtNum(r.perplexity, 2), `${r.model}, per token`),
      card('Bits per character', fmtNum(r.bits_per_char, 3), `${fmtCount(r.characters)} characters`),
      card('Bits per byte', fmtNum(r.bits_per_byte, 3), `${fmtCount(r.bytes)} bytes`),
      card('Tokens', fmtCount(r.tokens), `${fmtCount(r.predicted_tokens)} predicted, window ${r.window}`),
      card('Time', fmtNum(r.seconds, 2) + ' s', `${fmtNum(r.tokens_per_second)} tok/s`),
    );
  } catch (e) { out.innerHTML = ''; toast(e.message, true); }
}

// ---- Benchmark: model speed
async function runModelBench(ev) {
  ev.preventDefault();
  const lengths = $('#bench-lengths').value.split(',').map(s => parseInt(s.trim(), 10)).filter(n => n > 0);
  const tbody = $('#bench-model-table tbody');
  tbody.innerHTML = '';
  tbody.append(el('tr', {}, el('td', {colspan: 5, class: 'muted'}, 'running…')));
  try {
    const r = await kvad.post('/api/bench/model', {prompt_lengths: lengths, decode_tokens: parseInt($('#bench-decode').value, 10)});
    tbody.innerHTML = '';
    for (const row of r.rows)
      tbody.append(el('tr', {}, el('td', {class: 'num'}, row.prompt_tokens), el('td', {class: 'num'}, fmtNum(row.prefill_tok_s)),
        el('td', {class: 'num'}, row.decode_tokens), el('td', {class: 'num'}, fmtNum(row.decode_tok_s)), el('td', {class: 'num'}, fmtBytes(row.kv_bytes))));
    barChart($('#bench-model-chart'), r.rows.map(x => `${x.prompt_tokens} tok`), [
      {name: 'prefill tok/s', values: r.rows.map(x => x.prefill_tok_s)},
      {name: 'decode tok/s', values: r.rows.map(x => x.decode_tok_s)},
    ]);
    $('#bench-model-note').textContent = `${r.model} (${r.architecture}, ${r.weight_format}, ${fmtCount(r.parameters)} params) on ${r.threads} threads, ${r.isa}: ${r.cpu}`;
  } catch (e) { tbody.innerHTML = ''; toast(e.message, true); }
}

// ---- Benchmark: concurrent load
let loadTimer = null;
function renderLoad(s) {
  const c = $('#load-cards');
  c.innerHTML = '';
  c.append(
    card(s.running ? 'Running' : 'Finished', `${fmtNum(s.elapsed, 0)} s`, `${s.params.streams} streams, ${s.params.max_tokens} tokens each`),
    card('Throughput', fmtNum(s.throughput_tok_s) + ' tok/s', `${fmtCount(s.tokens)} tokens received`),
    card('Requests', `${s.requests.ok} ok`, `${s.requests.busy} refused (429), ${s.requests.errors} errors`),
    card('Time to first token', `${fmtNum(s.ttft.p50, 2)} s`, `p90 ${fmtNum(s.ttft.p90, 2)} s, p99 ${fmtNum(s.ttft.p99, 2)} s`),
    card('Inter-token latency', `${fmtNum(s.itl.p50 * 1000, 1)} ms`, `p90 ${fmtNum(s.itl.p90 * 1000, 1)} ms, p99 ${fmtNum(s.itl.p99 * 1000, 1)} ms`),
  );
  lineChart($('#load-tput'), [{name: 'tokens/s', points: s.timeline.map(p => [p.t, p.tokens])}], {xlabel: 'seconds', xmax: s.params.seconds});
  lineChart($('#load-ttft'), [
    {name: 'served (200)', points: s.recent.filter(r => r.status === 200).map(r => [r.t, r.ttft])},
  ], {xlabel: 'request start (s)', scatter: true, xmax: s.params.seconds, yfmt: v => v.toFixed(2)});
}
async function pollLoad() {
  try {
    const s = await kvad.get('/api/bench/load');
    renderLoad(s);
    if (!s.running) { clearInterval(loadTimer); loadTimer = null; }
  } catch (e) { clearInterval(loadTimer); loadTimer = null; }
}
async function startLoad(ev) {
  ev.preventDefault();
  try {
    await kvad.post('/api/bench/load', {
      streams: parseInt($('#load-streams').value, 10),
      seconds: parseInt($('#load-seconds').value, 10),
      max_tokens: parseInt($('#load-max').value, 10),
    });
    if (!loadTimer) loadTimer = setInterval(pollLoad, 1000);
    pollLoad();
  } catch (e) { toast(e.message, true); }
}

document.addEventListener('DOMContentLoaded', () => {
  kvad.on('page', p => p === 'train' && renderTrain());
  $('#score-form').addEventListener('submit', runScore);
  $('#score-file').addEventListener('change', async ev => {
    const f = ev.target.files[0];
    if (f) $('#score-text').value = await f.text();
  });
  $('#bench-model-form').addEventListener('submit', runModelBench);
  $('#bench-load-form').addEventListener('submit', startLoad);
  $('#load-stop').addEventListener('click', async () => { try { renderLoad(await kvad.del('/api/bench/load')); } catch (e) { toast(e.message, true); } });
  kvad.on('page', async p => {
    if (p !== 'bench') return;
    try { const s = await kvad.get('/api/bench/load'); if (s.elapsed > 0) renderLoad(s); if (s.running && !loadTimer) loadTimer = setInterval(pollLoad, 1000); } catch (e) { /* */ }
  });
});
