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
  // One unit for loss across the page: bits per character (the trainer logs nats; bits = nats / ln 2),
  // so the train loss, the validation figure, the chart and the finished figure compare directly.
  const bpc = nats => nats / Math.LN2;
  const lastVal = j.val.length ? j.val[j.val.length - 1] : null;
  c.append(
    card(`Job ${j.id}: ${j.name}`, j.state, `${j.params.size} ${j.params.arch}, ${fmtBytes(j.params.bytes)} of text`),
    card('Step', `${fmtInt(j.step)} / ${fmtInt(j.total_steps)}`, `${fmtNum(j.seconds, 0)} s`),
    card('Train loss', j.last_loss === null ? '–' : fmtNum(bpc(j.last_loss), 3) + ' bpc', 'bits per character, last step'),
    card('Validation loss', lastVal ? fmtNum(lastVal[2], 3) + ' bpc' : '–', lastVal ? `bits per character at step ${fmtInt(lastVal[0])}` : 'bits per character'),
  );
  if (j.summary) c.append(card('Finished', `${fmtNum(j.summary.val_bpc, 3)} bpc`, `validation; ${fmtCount(j.summary.params)} params, ${fmtCount(j.summary.chars_per_s_median)} chars/s`));
  if (j.state === 'finished') {
    c.append(el('div', {class: 'card card-action'}, el('div', {class: 'k'}, `${j.name} is in the store`),
      el('button', {id: 'train-chat', onclick: () => chatWith(j.name)}, 'Chat with it')));
  }
  lineChart($('#train-loss'), [
    {name: 'train (bpc)', points: j.loss.map(([step, nats]) => [step, bpc(nats)])},
    {name: 'validation (bpc)', points: j.val.map(v => [v[0], v[2]]), scatter: true},
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
    const t = await kvad.get('/kvad/train');
    $('#train-unavailable').classList.toggle('hidden', t.available);
    $('#train-reason').textContent = t.reason;
    $('#train-start').disabled = !t.available;
    renderTrainJob(t.current);
    const running = t.current && t.current.state === 'running';
    if (running && !trainState.timer) trainState.timer = setInterval(pollTrain, 1000);
    if (!running && trainState.timer) { clearInterval(trainState.timer); trainState.timer = null; kvad.emit('trained'); }
  } catch (e) { toast(e.message, true); }
}

async function startTrain(ev) {
  ev.preventDefault();
  if (!trainState.file) { toast('Choose a text file to train on.', true); return; }
  try {
    const j = await kvad.post('/kvad/train', {
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

// ---- Scoring (the last result is kept in this browser, shown again when the page is)
function renderScore(r) {
  const out = $('#score-result');
  out.innerHTML = '';
  if (!r) return;
  out.append(
    card('Perplexity', fmtNum(r.perplexity, 2), `${r.model}, per token`),
    card('Bits per character', fmtNum(r.bits_per_char, 3), `${fmtInt(r.characters)} characters`),
    card('Bits per byte', fmtNum(r.bits_per_byte, 3), `${fmtInt(r.bytes)} bytes`),
    card('Tokens', fmtInt(r.tokens), `${fmtInt(r.predicted_tokens)} predicted, window ${fmtInt(r.window)}`),
    card('Time', fmtNum(r.seconds, 2) + ' s', `${fmtNum(r.tokens_per_second)} tok/s`),
  );
}

async function runScore(ev) {
  ev.preventDefault();
  const text = $('#score-text').value;
  if (!text.trim()) { toast('Paste a text or choose a file first.', true); return; }
  const out = $('#score-result');
  out.innerHTML = '';
  out.append(card('Scoring…', '…'));
  try {
    const r = await kvad.post('/kvad/score', {text, window: parseInt($('#score-window').value, 10) || 0});
    remember('kvad_score_last', r);
    renderScore(r);
  } catch (e) { out.innerHTML = ''; toast(e.message, true); }
}

// ---- Benchmark: model speed (the last run is kept in this browser, shown again with the page).
// Prefill and decode each get their own chart: prefill is many times faster, and on one scale
// decode's bars were too short to read.
function renderModelBench(r) {
  const tbody = $('#bench-model-table tbody');
  tbody.innerHTML = '';
  if (!r) return;
  for (const row of r.rows)
    tbody.append(el('tr', {}, el('td', {class: 'num'}, fmtInt(row.prompt_tokens)), el('td', {class: 'num'}, fmtNum(row.prefill_tok_s)),
      el('td', {class: 'num'}, fmtInt(row.decode_tokens)), el('td', {class: 'num'}, fmtNum(row.decode_tok_s)), el('td', {class: 'num'}, fmtBytes(row.kv_bytes))));
  const labels = r.rows.map(x => `${x.prompt_tokens} tok`);
  barChart($('#bench-prefill-chart'), labels, [{name: 'prefill tok/s', values: r.rows.map(x => x.prefill_tok_s)}]);
  barChart($('#bench-decode-chart'), labels, [{name: 'decode tok/s', values: r.rows.map(x => x.decode_tok_s), color: chartColors[1]}]);
  $('#bench-model-note').textContent = `${r.model} (${r.architecture}, ${r.weight_format}, ${fmtCount(r.parameters)} params) on ${r.threads} threads, ${r.isa}: ${r.cpu}`;
}

async function runModelBench(ev) {
  ev.preventDefault();
  const lengths = $('#bench-lengths').value.split(',').map(s => parseInt(s.trim(), 10)).filter(n => n > 0);
  const tbody = $('#bench-model-table tbody');
  tbody.innerHTML = '';
  tbody.append(el('tr', {}, el('td', {colspan: 5, class: 'muted'}, 'running…')));
  try {
    const r = await kvad.post('/kvad/bench/model', {prompt_lengths: lengths, decode_tokens: parseInt($('#bench-decode').value, 10)});
    remember('kvad_bench_model_last', r);
    renderModelBench(r);
  } catch (e) { tbody.innerHTML = ''; toast(e.message, true); }
}

// ---- Benchmark: the serving sweep (throughput against TTFT and ITL, one point per concurrency)
let servingTimer = null;
function renderServing(s) {
  const tbody = $('#serving-table tbody');
  tbody.innerHTML = '';
  for (const r of s.results) {
    const tr = document.createElement('tr');
    for (const v of [r.concurrency, `${r.completed}${r.failed ? ` (+${r.failed} failed)` : ''}`, fmtNum(r.output_throughput),
      `${fmtNum(r.median_ttft_ms, 0)} ms`, `${fmtNum(r.p99_ttft_ms, 0)} ms`, `${fmtNum(r.median_itl_ms, 1)} ms`,
      `${fmtNum(r.p99_itl_ms, 1)} ms`, `${fmtNum(r.median_tpot_ms, 1)} ms`]) {
      const td = document.createElement('td'); td.className = 'num'; td.textContent = v; tr.append(td);
    }
    tbody.append(tr);
  }
  const at = key => s.results.map(r => [r.output_throughput, r[key]]);
  const labels = s.results.map(r => `c=${r.concurrency}`);
  const xopts = {xlabel: 'output tokens/s', xfmt: v => v.toFixed(0)};
  lineChart($('#serving-ttft'), [{name: 'median', points: at('median_ttft_ms'), labels}, {name: 'p99', points: at('p99_ttft_ms'), labels}], xopts);
  lineChart($('#serving-itl'), [{name: 'median', points: at('median_itl_ms'), labels}, {name: 'p99', points: at('p99_itl_ms'), labels}], xopts);
  $('#serving-stop').classList.toggle('hidden', !s.running);  // as Training's Cancel: only while it runs
  $('#serving-start').disabled = !!s.running;
  const p = $('#serving-progress');
  if (s.error) p.textContent = `Stopped: ${s.error}`;
  else if (s.running) p.textContent = `Running concurrency ${s.current.concurrency}: ${s.current.done} of ${s.current.of} requests (${fmtNum(s.elapsed, 0)} s)`;
  else if (s.results.length) p.textContent = `${s.cancelled ? 'Stopped' : 'Finished'} after ${fmtNum(s.elapsed, s.elapsed < 10 ? 1 : 0)} s: ${s.results.length} of ${s.params.levels.length} levels`;
  else p.textContent = '';
}
async function pollServing() {
  try {
    const s = await kvad.get('/kvad/bench/serving');
    renderServing(s);
    if (!s.running) { clearInterval(servingTimer); servingTimer = null; }
  } catch (e) { clearInterval(servingTimer); servingTimer = null; }
}
async function startServing(ev) {
  ev.preventDefault();
  try {
    const levels = $('#serving-levels').value.split(',').map(x => parseInt(x.trim(), 10)).filter(n => n > 0);
    await kvad.post('/kvad/bench/serving', {
      levels, input_len: parseInt($('#serving-input').value, 10), output_len: parseInt($('#serving-output').value, 10),
    });
    if (!servingTimer) servingTimer = setInterval(pollServing, 1000);
    pollServing();
  } catch (e) { toast(e.message, true); }
}

registerPage('train', pollTrain);
registerPage('score', () => renderScore(recall('kvad_score_last')));
registerPage('bench', async () => {
  renderModelBench(recall('kvad_bench_model_last'));
  try {
    const s = await kvad.get('/kvad/bench/serving');
    if (s.elapsed > 0) renderServing(s);
    if (s.running && !servingTimer) servingTimer = setInterval(pollServing, 1000);
  } catch (e) { /* the page still works; the sweep's state shows on the next run */ }
});

document.addEventListener('DOMContentLoaded', () => {
  $('#train-form').addEventListener('submit', startTrain);
  $('#train-file').addEventListener('change', async ev => {
    const f = ev.target.files[0];
    trainState.file = f ? await f.text() : null;
    $('#train-file-info').textContent = f ? `${f.name}: ${fmtBytes(f.size)}` : 'choose a text file (at least 1 KB)';
  });
  $('#train-cancel').addEventListener('click', async () => {
    if (!trainState.current) return;
    try { await kvad.del('/kvad/train/' + trainState.current.id); toast('Cancelling: kvad train saves a checkpoint first'); pollTrain(); }
    catch (e) { toast(e.message, true); }
  });
  $('#score-form').addEventListener('submit', runScore);
  $('#score-file').addEventListener('change', async ev => {
    const f = ev.target.files[0];
    if (f) $('#score-text').value = await f.text();
  });
  $('#bench-model-form').addEventListener('submit', runModelBench);
  $('#bench-serving-form').addEventListener('submit', startServing);
  $('#serving-stop').addEventListener('click', async () => { try { renderServing(await kvad.del('/kvad/bench/serving')); } catch (e) { toast(e.message, true); } });
});
