// Training, Scoring and Benchmark pages.
'use strict';

// ---- Training
const trainState = {file: null, timer: null, current: null};

function renderTrainJob(j) {
  trainState.current = j;
  const running = j && j.state === 'running';
  $('#train-cancel').classList.toggle('hidden', !running);
  $('#train-start').disabled = running;
  const c = $('#train-cards');
  c.innerHTML = '';
  if (!j) return;
  const lastVal = j.val.length ? j.val[j.val.length - 1] : null;
  c.append(
    card(`Job ${j.id}: ${j.name}`, j.state, `${j.params.size} ${j.params.arch}, ${fmtCount(j.params.bytes)} bytes of text`),
    card('Step', `${j.step} / ${j.total_steps}`, `${fmtNum(j.seconds, 0)} s`),
    card('Train loss', fmtNum(j.last_loss, 4), 'nats per character'),
    card('Validation', lastVal ? fmtNum(lastVal[2], 3) + ' bpc' : '–', lastVal ? `loss ${fmtNum(lastVal[1], 4)} at step ${lastVal[0]}` : 'bits per character'),
  );
  if (j.summary) c.append(card('Finished', `${fmtNum(j.summary.val_bpc, 3)} bpc`, `${fmtCount(j.summary.params)} params, ${fmtCount(j.summary.chars_per_s_median)} chars/s`));
  lineChart($('#train-loss'), [
    {name: 'train loss', points: j.loss},
    {name: 'val loss', points: j.val.map(v => [v[0], v[1]]), scatter: true},
  ], {xlabel: 'step', xmax: j.total_steps, yfmt: v => v.toFixed(2)});
  const s = $('#train-samples');
  s.innerHTML = '';
  if (!j.samples.length) s.textContent = 'none yet';
  for (const x of [...j.samples].reverse()) s.append(el('div', {class: 'sample'}, el('b', {}, `step ${x.step}: `), x.text));
  const log = $('#train-log');
  log.textContent = j.log.join('\n');
  log.scrollTop = log.scrollHeight;
}

async function pollTrain() {
  try {
    const t = await kvad.get('/api/train');
    $('#train-unavailable').classList.toggle('hidden', t.available);
    $('#train-reason').textContent = t.reason;
    $('#train-start').disabled = !t.available;
    renderTrainJob(t.current);
    const running = t.current && t.current.state === 'running';
    if (running && !trainState.timer) trainState.timer = setInterval(pollTrain, 1000);
    if (!running && trainState.timer) { clearInterval(trainState.timer); trainState.timer = null; kvad.emit('trained'); }
  } catch (e) { toast(e.message, true); }
}
function renderTrain() { pollTrain(); }

async function startTrain(ev) {
  ev.preventDefault();
  if (!trainState.file) { toast('Choose a text file to train on.', true); return; }
  try {
    const j = await kvad.post('/api/train', {
      name: $('#train-name').value.trim(),
      size: $('#train-size').value,
      arch: $('#train-arch').value,
      steps: parseInt($('#train-steps').value, 10),
      replace: $('#train-replace').checked,
      text: trainState.file,
    });
    renderTrainJob(j);
    pollTrain();
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
    card('Time to first token', `${fmtNum(s.ttft.p50, 2)} s`, `p90 ${fmtNum(s.ttft.p90, 2)} s, p99 ${fmtNum(s.ttft.p99, 2)} s once admitted`),
    card('…counting retries after 429', `${fmtNum(s.ttft_waiting.p50, 2)} s`, `p90 ${fmtNum(s.ttft_waiting.p90, 2)} s, p99 ${fmtNum(s.ttft_waiting.p99, 2)} s: what a user waits`),
    card('Inter-token latency', `${fmtNum(s.itl.p50 * 1000, 1)} ms`, `p90 ${fmtNum(s.itl.p90 * 1000, 1)} ms, p99 ${fmtNum(s.itl.p99 * 1000, 1)} ms`),
  );
  lineChart($('#load-tput'), [{name: 'tokens/s', points: s.timeline.map(p => [p.t, p.tokens])}], {xlabel: 'seconds', xmax: s.params.seconds});
  lineChart($('#load-ttft'), [
    {name: 'once admitted', points: s.recent.filter(r => r.status === 200).map(r => [r.t, r.ttft])},
    {name: 'counting 429 retries', points: s.recent.filter(r => r.status === 200).map(r => [r.t, r.ttft_waiting])},
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
  $('#train-form').addEventListener('submit', startTrain);
  $('#train-file').addEventListener('change', async ev => {
    const f = ev.target.files[0];
    trainState.file = f ? await f.text() : null;
    $('#train-file-info').textContent = f ? `${f.name}: ${fmtBytes(f.size)}` : 'choose a text file (at least 1 KB)';
  });
  $('#train-cancel').addEventListener('click', async () => {
    if (!trainState.current) return;
    try { await kvad.del('/api/train/' + trainState.current.id); toast('Cancelling: kvad train saves a checkpoint first'); pollTrain(); }
    catch (e) { toast(e.message, true); }
  });
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
