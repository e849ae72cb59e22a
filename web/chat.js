// Chat page: the current conversation (conversations.js) is sent whole each turn; the server reuses
// the KV cache of the prefix it already holds, which each answer's "cached" figure shows. User text
// is shown as text, answers as sanitised Markdown (markdown.js).
'use strict';

const chat = {controller: null, busy: false};

function chatMessages(c) {
  const msgs = [];
  if (c.system && c.system.trim()) msgs.push({role: 'system', content: c.system.trim()});
  for (const m of c.messages) {
    if (m.role === 'assistant' && !m.content && m.meta && m.meta.error) continue;  // a failed request said nothing
    msgs.push({role: m.role, content: m.content});
  }
  return msgs;
}

function emptyNote() { return el('div', {class: 'empty muted'}, 'Say something to the model.'); }

function renderChat() {
  const c = conversations.current();
  $('#chat-system').value = c.system || '';
  const log = $('#chat-log');
  log.innerHTML = '';
  if (!c.messages.length) log.append(emptyNote());
  c.messages.forEach((m, i) => log.append(messageBubble(c, m, i)));
  log.scrollTop = log.scrollHeight;
  renderConversationList();
  renderTokenMeter();
}

function messageBubble(c, m, i) {
  const text = el('div', {class: 'text'});
  if (m.role === 'assistant') renderMarkdown(text, m.content);
  else text.textContent = m.content;
  const b = el('div', {class: `msg ${m.role}${m.meta && m.meta.error ? ' error' : ''}`, 'data-index': i}, text);
  if (m.meta) appendAnswerMeta(b, m.meta);
  const bar = el('div', {class: 'actions'},
    el('button', {type: 'button', class: 'link act-copy', onclick: () => copyText(m.content)}, 'Copy'));
  if (m.role === 'user') bar.append(el('button', {type: 'button', class: 'link act-edit', onclick: () => editMessage(i)}, 'Edit'));
  if (m.role === 'assistant' && i === c.messages.length - 1)
    bar.append(el('button', {type: 'button', class: 'link act-regenerate', onclick: regenerate}, 'Regenerate'));
  b.append(bar);
  return b;
}

function appendAnswerMeta(b, meta) {
  if (meta.error) b.append(el('div', {class: 'err'}, 'Error: ' + meta.error));
  if (meta.context_full)
    b.append(el('div', {class: 'context-full'}, `The context is full (${fmtInt(meta.context_full)} tokens): the answer stopped there. ` +
      'Start a new conversation, or edit an earlier message to make room.'));
  if (meta.stats) b.append(el('span', {class: 'stats'}, meta.stats));
}

function renderTokenMeter() {
  const c = conversations.current();
  const n = conversationTokens(c);
  const m = kvad.info && kvad.info.model;
  const meter = $('#chat-tokens');
  meter.textContent = m ? `${fmtInt(n || 0)} / ${fmtInt(m.context_length)} tokens` : (n === null ? '' : `${fmtInt(n)} tokens`);
  meter.classList.toggle('near-full', !!(m && n !== null && n >= 0.9 * m.context_length));
}

function setBusy(on) {
  chat.busy = on;
  $('#chat-send').classList.toggle('hidden', on);
  $('#chat-stop').classList.toggle('hidden', !on);
  $('#chat-log').classList.toggle('busy', on);  // no edit / regenerate while an answer streams
}

// The sampling fields to send, or null (and the settings opened, the fault said) when one is invalid.
function samplingOrSay() {
  try { return samplerRequestFields(); } catch (e) { $('#chat-settings').open = true; toast(e.message, true); return null; }
}

// Answers the conversation as it stands (its last message is the user's).
async function generate(sampling) {
  if (chat.busy) return;
  const c = conversations.current();
  const answer = {role: 'assistant', content: '', meta: {}};
  const body = {model: kvad.info.model.id, messages: chatMessages(c), stream: true, stream_options: {include_usage: true}, ...sampling};
  c.messages.push(answer);
  const log = $('#chat-log');
  const empty = $('.empty', log);
  if (empty) empty.remove();
  const bubble = messageBubble(c, answer, c.messages.length - 1);
  bubble.classList.add('streaming');
  log.append(bubble);
  log.scrollTop = log.scrollHeight;
  const text = $('.text', bubble);
  setBusy(true);
  chat.controller = new AbortController();
  const t0 = performance.now();
  let tFirst = null, usage = null, timings = null, finish = null, changed = false;
  try {
    const res = await fetch('/v1/chat/completions', {method: 'POST', headers: kvad.headers(true), signal: chat.controller.signal, body: JSON.stringify(body)});
    if (!res.ok) {
      const err = await res.json().catch(() => null);
      throw new Error(err && err.error ? err.error.message : `HTTP ${res.status}`);
    }
    await readSSE(res, ev => {
      if (ev.error) throw new Error(ev.error.message);
      if (ev.usage) usage = ev.usage;
      if (ev.timings) timings = ev.timings;
      const ch = ev.choices && ev.choices[0];
      if (!ch) return;
      if (ch.delta && ch.delta.content) {
        if (tFirst === null) tFirst = performance.now();
        answer.content += ch.delta.content;
        changed = true;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
      if (ch.finish_details && ch.finish_details.type === 'context_full') answer.meta.context_full = ch.finish_details.context_length;
    }, () => {
      if (!changed) return;
      changed = false;
      renderMarkdown(text, answer.content);
      log.scrollTop = log.scrollHeight;
    });
  } catch (e) {
    if (e.name === 'AbortError') finish = 'stopped';
    else answer.meta.error = e.message;
  }
  const t1 = performance.now();
  const parts = [];
  if (usage) {
    answer.meta.usage = {prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens};
    parts.push(`${usage.completion_tokens} tokens`);
    parts.push(`prompt ${usage.prompt_tokens} (${usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0} cached)`);
    // The server's decode speed: timed here, it would be the speed of the network reads, which
    // can carry many tokens at once.
    if (timings && timings.decode_tokens_per_second > 0) parts.push(`${timings.decode_tokens_per_second.toFixed(1)} tok/s`);
    else if (tFirst !== null && usage.completion_tokens > 1 && t1 > tFirst)
      parts.push(`${((usage.completion_tokens - 1) / ((t1 - tFirst) / 1000)).toFixed(1)} tok/s`);
  }
  if (tFirst !== null) parts.push(`first token ${((tFirst - t0) / 1000).toFixed(2)} s`);
  if (finish) parts.push(answer.meta.context_full ? 'context full' : finish);
  answer.meta.finish = finish;
  answer.meta.stats = parts.join(' · ');
  conversations.touch(c);
  chat.controller = null;
  setBusy(false);
  if (conversations.current() === c) renderChat();
}

function modelReady() {
  if (kvad.info && kvad.info.model) return true;
  toast('No model is loaded: pick one in the list (or on the Models page).', true);
  return false;
}

// Sends text as the next user message (after the first `keep` messages when given: an edit).
function sendMessage(text, keep) {
  if (chat.busy || !modelReady()) return false;
  const sampling = samplingOrSay();
  if (!sampling) return false;
  const c = conversations.current();
  if (keep !== undefined) c.messages = c.messages.slice(0, keep);
  c.messages.push({role: 'user', content: text});
  conversations.touch(c);
  renderChat();
  generate(sampling);
  return true;
}

// The last answer again, from the same conversation.
function regenerate() {
  const c = conversations.current();
  if (chat.busy || !modelReady() || !c.messages.length || c.messages[c.messages.length - 1].role !== 'assistant') return;
  const sampling = samplingOrSay();
  if (!sampling) return;
  c.messages.pop();
  conversations.touch(c);
  renderChat();
  generate(sampling);
}

// Edits user message i in place; sending drops everything after it and asks again.
function editMessage(i) {
  if (chat.busy) return;
  const c = conversations.current();
  const b = $(`#chat-log .msg[data-index="${i}"]`);
  const box = el('textarea', {class: 'edit-text', rows: 3});
  box.value = c.messages[i].content;
  const resend = () => {
    const t = box.value.trim();
    if (t) sendMessage(t, i);
  };
  box.addEventListener('keydown', ev => { if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); resend(); } });
  b.replaceChildren(box, el('div', {class: 'actions'},
    el('button', {type: 'button', class: 'act-resend', onclick: resend}, 'Send'),
    el('button', {type: 'button', class: 'secondary', onclick: renderChat}, 'Cancel')));
  box.focus();
}

async function copyText(t) {
  try {
    await navigator.clipboard.writeText(t);
  } catch (e) {  // no Clipboard API (a page not served from localhost or https): the old way
    const ta = el('textarea', {class: 'offscreen'});
    ta.value = t;
    document.body.append(ta);
    ta.select();
    const ok = document.execCommand('copy');
    ta.remove();
    if (!ok) { toast('This browser would not copy: select the text instead.', true); return; }
  }
  toast('Copied');
}

function stopAnswer() { if (chat.controller) chat.controller.abort(); }

function switchConversation(id) {
  stopAnswer();
  conversations.select(id);
  renderChat();
}

function deleteConversation(id) {
  const c = conversations.state.list.find(x => x.id === id);
  if (c && c.messages.length && !confirm(`Delete "${c.title || 'this conversation'}"?`)) return;
  if (id === conversations.state.current) stopAnswer();
  conversations.remove(id);
  renderChat();
}

async function fillModelPicker() {
  const sel = $('#chat-model');
  try {
    const r = await kvad.get('/kvad/models');
    sel.innerHTML = '';
    if (!r.loaded) sel.append(el('option', {value: ''}, '(no model loaded)'));
    for (const m of r.models) {
      if (!m.supported) continue;
      sel.append(el('option', {value: m.name, selected: m.loaded}, `${m.loaded ? '● ' : ''}${m.name.split('/').pop()} (${m.architecture}, ${fmtCount(m.parameters)})`));
    }
  } catch (e) { /* shown elsewhere */ }
}

registerPage('chat', () => {
  if (chat.busy) return;  // the streaming answer's bubble stays as it is
  conversations.load();  // another tab may have changed them
  renderChat();
});

document.addEventListener('DOMContentLoaded', () => {
  conversations.load();
  $('#chat-form').addEventListener('submit', ev => {
    ev.preventDefault();
    const text = $('#chat-input').value.trim();
    if (text && sendMessage(text)) $('#chat-input').value = '';
  });
  $('#chat-input').addEventListener('keydown', ev => {
    if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); $('#chat-form').requestSubmit(); }
  });
  $('#chat-stop').addEventListener('click', stopAnswer);
  $('#chat-new').addEventListener('click', () => {
    stopAnswer();
    if (conversations.current().messages.length) conversations.create();
    renderChat();
    $('#chat-input').focus();
  });
  $('#chat-system').addEventListener('input', ev => {
    const c = conversations.current();
    c.system = ev.target.value;
    conversations.save();
  });
  $('#chat-model').addEventListener('change', async ev => {
    const name = ev.target.value;
    if (!name) return;
    toast(`Loading ${name}…`);
    try {
      await kvad.post('/kvad/models/load', {name});
      toast(`Loaded ${name}`);
      await refreshInfo();
    } catch (e) { toast(e.message, true); }
    fillModelPicker();
  });
  kvad.on('info', () => { fillModelPicker(); renderTokenMeter(); });
});
