// Training, Scoring and Benchmark pages.
'use strict';

// ---- Training
const trainState = {file: null, timer: null, current: null};

// "Train a model from scratch" or "Fine-tune an adapter (LoRA)": the form's fields for the one chosen.
function trainMode() { return $('#train-mode-lora').checked ? 'lora' : 'model'; }
function showTrainMode() {
  const lora = trainMode() === 'lora';
  for (const e of document.querySelectorAll('.train-lora-only')) e.classList.toggle('hidden', !lora);
  for (const e of document.querySelectorAll('.train-model-only')) e.classList.toggle('hidden', lora);
  if (lora) fillBasePicker();
}

// The LoRA base: a model the Models page lists (and kvad can run), the loaded one first.
async function fillBasePicker() {
  const sel = $('#train-base'), keep = sel.value;
  try {
    const r = await kvad.get('/kvad/models');
    const ms = r.models.filter(m => m.supported).sort((a, b) => b.loaded - a.loaded);
    sel.replaceChildren(...ms.map(m => el('option', {value: m.name}, `${m.loaded ? '● ' : ''}${m.name.split('/').pop()} (${m.architecture}, ${fmtCount(m.parameters)})`)));
    if ([...sel.options].some(o => o.value === keep)) sel.value = keep;
  } catch (e) { toast(e.message, true); }
}

// The store's adapters (GET /kvad/adapters): base, the validation bits per character of the base
// and of the adapter, and whether the chat offers it now.
async function renderStoreAdapters() {
  const tbody = $('#train-adapters tbody');
  let r;
  try { r = await kvad.get('/kvad/adapters'); } catch (e) { return; }
  tbody.replaceChildren();
  if (!r.adapters.length) tbody.append(el('tr', {}, el('td', {colspan: 7, class: 'muted'}, 'None yet: fine-tune one above.')));
  for (const a of r.adapters) {
    tbody.append(el('tr', {},
      el('td', {}, a.name), el('td', {class: 'small'}, a.base), el('td', {class: 'num'}, fmtInt(a.rank)),
      el('td', {class: 'num'}, fmtInt(a.step)), el('td', {class: 'num'}, fmtNum(a.base_val_bpc, 3)),
      el('td', {class: 'num'}, fmtNum(a.val_bpc, 3)),
      el('td', {}, a.id === null ? el('span', {class: 'muted small'}, 'its base is not loaded')
        : el('button', {class: 'secondary', onclick: () => useAdapter(a.id)}, 'Use in chat'))));
  }
}

// Opens the chat with adapter `id` chosen in its picker.
async function useAdapter(id) {
  await refreshAdapters();
  const sel = $('#chat-lora');
  if (![...sel.options].some(o => o.value === String(id))) { toast(`Adapter ${id} is not loaded`, true); return; }
  sel.value = String(id);
  go('chat');
  $('#chat-input').focus();
}

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
  const lora = j.kind === 'lora';
  const what = lora ? `LoRA rank ${j.params.rank}${j.params.targets && j.params.targets !== 'all-linear' ? ` (${j.params.targets})` : ''}${j.params.rslora ? ', rsLoRA' : ''} on ${j.base.split('/').pop()}, ${fmtBytes(j.params.bytes)} of ${j.params.format === 'chat' ? 'chat JSONL' : 'text'}`
    : `${j.params.size} ${j.params.arch}, ${fmtBytes(j.params.bytes)} of text`;
  const baseVal = lora ? j.val.find(v => v[0] === 0) : null;
  c.append(
    card(`Job ${j.id}: ${j.name}`, j.state, what),
    card('Step', `${fmtInt(j.step)} / ${fmtInt(j.total_steps)}`, `${fmtNum(j.seconds, 0)} s`),
    card('Train loss', j.last_loss === null ? '–' : fmtNum(bpc(j.last_loss), 3) + ' bpc', 'bits per character, last step'),
    card('Validation loss', lastVal ? fmtNum(lastVal[2], 3) + ' bpc' : '–', lastVal ? `bits per character at step ${fmtInt(lastVal[0])}` : 'bits per character'),
  );
  if (baseVal) c.append(card('The base (step 0)', fmtNum(baseVal[2], 3) + ' bpc', 'validation, before any training: the figure to beat'));
  if (j.summary) c.append(card('Finished', `${fmtNum(j.summary.val_bpc, 3)} bpc`, `validation; ${fmtCount(j.summary.params)} ${lora ? 'adapter ' : ''}params, ${fmtCount(j.summary.chars_per_s_median)} chars/s`));
  if (j.state === 'finished' && lora && j.adapter) {
    c.append(el('div', {class: 'card card-action'}, el('div', {class: 'k'}, j.adapter.message),
      j.adapter.loaded ? el('button', {id: 'train-use-adapter', onclick: () => useAdapter(j.adapter.id)}, 'Use in chat') : null));
  } else if (j.state === 'finished') {
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
    renderStoreAdapters();
  } catch (e) { toast(e.message, true); }
}

async function startTrain(ev) {
  ev.preventDefault();
  const lora = trainMode() === 'lora';
  const text = lora && $('#train-text').value.trim() ? $('#train-text').value : trainState.file;
  if (!text) { toast(lora ? 'Choose a file or paste the text to fine-tune on.' : 'Choose a text file to train on.', true); return; }
  const common = {name: $('#train-name').value.trim(), steps: parseInt($('#train-steps').value, 10), replace: $('#train-replace').checked, text};
  const int = id => ($(id).value.trim() === '' ? undefined : parseInt($(id).value, 10));
  const num = id => ($(id).value.trim() === '' ? undefined : parseFloat($(id).value));
  try {
    const j = await kvad.post('/kvad/train', lora
      ? {...common, kind: 'lora', base: $('#train-base').value, rank: int('#train-rank'), batch: int('#train-batch'), context: int('#train-context'),
         targets: $('#train-targets').value.trim() || undefined, lr: num('#train-lr'), rslora: $('#train-rslora').checked}
      : {...common, size: $('#train-size').value, arch: $('#train-arch').value});
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

registerPage('train', () => { pollTrain(); if (trainMode() === 'lora') fillBasePicker(); });
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
  for (const r of document.querySelectorAll('input[name="train-mode"]')) r.addEventListener('change', showTrainMode);
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
