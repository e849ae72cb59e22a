// Chat page: the conversation is kept here and sent whole each turn; the server reuses the KV cache
// of the prefix it already holds, which each answer's "cached" figure shows.
'use strict';

const chat = {history: [], controller: null, busy: false};

function chatMessages() {
  const msgs = [];
  const sys = $('#chat-system').value.trim();
  if (sys) msgs.push({role: 'system', content: sys});
  return msgs.concat(chat.history);
}

function addBubble(role, text) {
  const log = $('#chat-log');
  const empty = $('.empty', log);
  if (empty) empty.remove();
  const b = el('div', {class: 'msg ' + role}, el('span', {class: 'text'}, text));
  log.append(b);
  log.scrollTop = log.scrollHeight;
  return b;
}

function setBusy(on) {
  chat.busy = on;
  $('#chat-send').classList.toggle('hidden', on);
  $('#chat-stop').classList.toggle('hidden', !on);
}

// Reads an SSE response body, calling onEvent(json) for each data line until [DONE].
async function readSSE(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

async function sendChat(text) {
  if (chat.busy) return;
  if (!kvad.info || !kvad.info.model) { toast('No model is loaded: pick one in the list (or on the Models page).', true); return; }
  chat.history.push({role: 'user', content: text});
  addBubble('user', text);
  const bubble = addBubble('assistant', '');
  bubble.classList.add('streaming');
  const span = $('.text', bubble);
  setBusy(true);
  chat.controller = new AbortController();
  const t0 = performance.now();
  let tFirst = null, answer = '', usage = null, finish = null;
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: kvad.headers(true),
      signal: chat.controller.signal,
      body: JSON.stringify({
        model: kvad.info.model.id,
        messages: chatMessages(),
        stream: true,
        stream_options: {include_usage: true},
        temperature: parseFloat($('#chat-temp').value),
        max_tokens: parseInt($('#chat-max').value, 10),
      }),
    });
    if (!res.ok) {
      const err = await res.json().catch(() => null);
      throw new Error(err && err.error ? err.error.message : `HTTP ${res.status}`);
    }
    await readSSE(res, ev => {
      if (ev.error) throw new Error(ev.error.message);
      if (ev.usage) usage = ev.usage;
      const c = ev.choices && ev.choices[0];
      if (!c) return;
      if (c.delta && c.delta.content) {
        if (tFirst === null) tFirst = performance.now();
        answer += c.delta.content;
        span.textContent = answer;
        $('#chat-log').scrollTop = $('#chat-log').scrollHeight;
      }
      if (c.finish_reason) finish = c.finish_reason;
    });
  } catch (e) {
    if (e.name === 'AbortError') finish = 'stopped';
    else {
      bubble.classList.add('error');
      span.textContent = (answer ? answer + '\n\n' : '') + 'Error: ' + e.message;
    }
  }
  const t1 = performance.now();
  bubble.classList.remove('streaming');
  chat.history.push({role: 'assistant', content: answer});
  const parts = [];
  if (usage) {
    parts.push(`${usage.completion_tokens} tokens`);
    parts.push(`prompt ${usage.prompt_tokens} (${usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0} cached)`);
    if (tFirst !== null && usage.completion_tokens > 1 && t1 > tFirst)
      parts.push(`${((usage.completion_tokens - 1) / ((t1 - tFirst) / 1000)).toFixed(1)} tok/s`);
  }
  if (tFirst !== null) parts.push(`first token ${((tFirst - t0) / 1000).toFixed(2)} s`);
  if (finish) parts.push(finish);
  if (parts.length) bubble.append(el('span', {class: 'stats'}, parts.join(' · ')));
  setBusy(false);
  chat.controller = null;
}

async function fillModelPicker() {
  const sel = $('#chat-model');
  try {
    const r = await kvad.get('/api/models');
    sel.innerHTML = '';
    if (!r.loaded) sel.append(el('option', {value: ''}, '(no model loaded)'));
    for (const m of r.models) {
      if (!m.supported) continue;
      sel.append(el('option', {value: m.name, selected: m.loaded}, `${m.loaded ? '● ' : ''}${m.name.split('/').pop()} (${m.architecture}, ${fmtCount(m.parameters)})`));
    }
  } catch (e) { /* shown elsewhere */ }
}

document.addEventListener('DOMContentLoaded', () => {
  $('#chat-form').addEventListener('submit', ev => {
    ev.preventDefault();
    const text = $('#chat-input').value.trim();
    if (!text) return;
    $('#chat-input').value = '';
    sendChat(text);
  });
  $('#chat-input').addEventListener('keydown', ev => {
    if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); $('#chat-form').requestSubmit(); }
  });
  $('#chat-stop').addEventListener('click', () => chat.controller && chat.controller.abort());
  $('#chat-new').addEventListener('click', () => {
    chat.history = [];
    $('#chat-log').innerHTML = '';
    $('#chat-log').append(el('div', {class: 'empty muted'}, 'Say something to the model.'));
  });
  $('#chat-model').addEventListener('change', async ev => {
    const name = ev.target.value;
    if (!name) return;
    toast(`Loading ${name}…`);
    try {
      await kvad.post('/api/models/load', {name});
      toast(`Loaded ${name}`);
      await refreshInfo();
    } catch (e) { toast(e.message, true); }
    fillModelPicker();
  });
  kvad.on('info', fillModelPicker);
});
