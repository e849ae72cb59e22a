// The chat's sampling settings: every sampling field /v1/chat/completions takes, with the ranges
// src/serve/openai.cpp accepts, kept in this browser (localStorage 'kvad_sampler'). An empty field
// is not sent, so the server's default (OpenAI's) applies and the placeholder says what that is.
'use strict';

const samplerFields = [
  {id: 'chat-temp', key: 'temperature', label: 'Temperature', min: 0, max: 2, step: 0.05, initial: '0.7', placeholder: '1'},
  {id: 'chat-max', key: 'max_tokens', label: 'Max tokens', min: 1, max: 2 ** 30, step: 1, int: true, initial: '256', placeholder: 'until the context is full'},
  {id: 'chat-top-p', key: 'top_p', label: 'Top-p', min: 0, max: 1, step: 0.05, placeholder: '1 (off)'},
  {id: 'chat-top-k', key: 'top_k', label: 'Top-k', min: 0, max: 2 ** 24, step: 1, int: true, placeholder: '0 (off)'},
  {id: 'chat-min-p', key: 'min_p', label: 'Min-p', min: 0, max: 1, step: 0.01, placeholder: '0 (off)'},
  {id: 'chat-presence', key: 'presence_penalty', label: 'Presence penalty', min: -2, max: 2, step: 0.1, placeholder: '0'},
  {id: 'chat-frequency', key: 'frequency_penalty', label: 'Frequency penalty', min: -2, max: 2, step: 0.1, placeholder: '0'},
  {id: 'chat-repetition', key: 'repetition_penalty', label: 'Repetition penalty', min: 0.001, max: 100, step: 0.05, placeholder: '1 (off)'},
  {id: 'chat-seed', key: 'seed', label: 'Seed', min: -(2 ** 53), max: 2 ** 53, step: 1, int: true, placeholder: 'random'},
  {id: 'chat-stops', key: 'stop', label: 'Stop sequences (one a line, up to 4; \\n for a newline)', stop: true},
];
const samplerKey = 'kvad_sampler';

function buildSamplerPanel() {
  const box = $('#sampler-fields');
  const saved = recall(samplerKey) || {};
  for (const f of samplerFields) {
    const input = f.stop
      ? el('textarea', {id: f.id, rows: 2, placeholder: '(none)'})
      : el('input', {id: f.id, type: 'number', min: f.min, max: f.max, step: f.step, placeholder: f.placeholder, inputmode: 'decimal'});
    input.value = f.key in saved ? saved[f.key] : (f.initial || '');
    input.addEventListener('input', saveSampler);
    box.append(el('label', {class: f.stop ? 'wide' : ''}, f.label, input));
  }
  $('#sampler-reset').addEventListener('click', () => {
    for (const f of samplerFields) $('#' + f.id).value = f.initial || '';
    saveSampler();
  });
}

function saveSampler() {
  const v = {};
  for (const f of samplerFields) v[f.key] = $('#' + f.id).value;
  remember(samplerKey, v);
}

// "\n" and "\t" in a stop line stand for the characters (a line cannot hold a newline itself).
function unescapeStop(s) { return s.replace(/\\n/g, '\n').replace(/\\t/g, '\t'); }

// The request's sampling fields; throws an Error naming a field whose value the API would refuse.
function samplerRequestFields() {
  const out = {};
  for (const f of samplerFields) {
    const input = $('#' + f.id), raw = input.value;
    if (input.validity && input.validity.badInput) throw new Error(`${f.label} is not a number`);
    if (f.stop) {
      const stops = raw.split('\n').filter(s => s.length).map(unescapeStop);
      if (stops.length > 4) throw new Error(`${f.label}: at most 4, got ${stops.length}`);
      if (stops.length) out.stop = stops;
      continue;
    }
    if (raw.trim() === '') continue;
    const x = Number(raw);
    if (!Number.isFinite(x) || (f.int && !Number.isInteger(x)) || x < f.min || x > f.max)
      throw new Error(`${f.label} must be ${f.int ? 'an integer' : 'a number'} from ${f.min} to ${f.max}, not "${raw}"`);
    out[f.key] = x;
  }
  return Object.assign(out, loraRequestField());
}

// The server's LoRA adapters (kvad serve --lora, the Training page's LoRA jobs, GET /lora-adapters): the chat runs the server's
// default scales, none, or one adapter at its listed scale (1 when the server has it at 0), sent
// as the request's `lora` field. Hidden when the server has none.
async function refreshAdapters() {
  const box = $('#chat-lora-box'), sel = $('#chat-lora');
  let list = [];
  try { list = await kvad.get('/lora-adapters'); } catch (e) { list = []; }
  box.hidden = !list.length;
  const keep = sel.value;
  const name = a => a.path.split('/').filter(Boolean).pop();
  sel.replaceChildren(el('option', {value: ''}, 'server default'), el('option', {value: 'none'}, 'none (the base)'),
    ...list.map(a => el('option', {value: String(a.id), 'data-scale': String(a.scale || 1)}, `${name(a)} (scale ${a.scale || 1})`)));
  if ([...sel.options].some(o => o.value === keep)) sel.value = keep;
}

function loraRequestField() {
  const sel = $('#chat-lora');
  if (!sel || $('#chat-lora-box').hidden || sel.value === '') return {};
  if (sel.value === 'none') return {lora: []};
  return {lora: [{id: Number(sel.value), scale: Number(sel.selectedOptions[0].dataset.scale)}]};
}
// Refreshed when the model changes (info), when the chat is shown and after a training job ends.
kvad.on('info', refreshAdapters);
kvad.on('trained', refreshAdapters);
kvad.on('page', p => { if (p === 'chat') refreshAdapters(); });

document.addEventListener('DOMContentLoaded', buildSamplerPanel);
