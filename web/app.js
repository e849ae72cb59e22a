// kvad web UI: shared pieces (API calls with the key, the page router, formatting, the status bar).
'use strict';

const kvad = {
  key: localStorage.getItem('kvad_api_key') || '',
  info: null,
  listeners: {},

  headers(json) {
    const h = {};
    if (json) h['Content-Type'] = 'application/json';
    if (this.key) h['Authorization'] = 'Bearer ' + this.key;
    return h;
  },
  async call(method, path, body) {
    const res = await fetch(path, {method, headers: this.headers(body !== undefined), body: body !== undefined ? JSON.stringify(body) : undefined});
    let data = null;
    try { data = await res.json(); } catch (e) { /* not JSON */ }
    if (!res.ok) {
      if (res.status === 401) showKeyBar();
      const msg = data && data.error ? data.error.message : `HTTP ${res.status}`;
      const err = new Error(msg);
      err.status = res.status;
      throw err;
    }
    return data;
  },
  get(path) { return this.call('GET', path); },
  post(path, body) { return this.call('POST', path, body === undefined ? {} : body); },
  del(path) { return this.call('DELETE', path); },
  on(name, fn) { (this.listeners[name] = this.listeners[name] || []).push(fn); },
  emit(name, arg) { (this.listeners[name] || []).forEach(fn => fn(arg)); },
};

function $(sel, root) { return (root || document).querySelector(sel); }
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function fmtBytes(b) {
  if (b === null || b === undefined || isNaN(b)) return '–';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (Math.abs(b) >= 1000 && i < u.length - 1) { b /= 1000; i++; }
  return (i === 0 ? b.toFixed(0) : b.toFixed(b < 10 ? 2 : 1)) + ' ' + u[i];
}
function fmtCount(n) {
  if (!n) return '0';
  if (n >= 1e9) return (n / 1e9).toFixed(2) + 'B';
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'K';
  return String(n);
}
// Exact integers with thousands separators, for token counts and contexts: "4,096", not "4.1K".
function fmtInt(n) { return n === null || n === undefined || isNaN(n) ? '–' : Math.round(n).toLocaleString('en-US'); }
function fmtNum(x, d = 1) { return x === null || x === undefined || isNaN(x) ? '–' : Number(x).toFixed(d); }
function card(k, v, s) { return el('div', {class: 'card'}, el('div', {class: 'k'}, k), el('div', {class: 'v'}, v), s ? el('div', {class: 's'}, s) : null); }

let toastTimer = null;
function toast(msg, isError) {
  const t = $('#toast');
  t.textContent = msg;
  t.className = 'toast' + (isError ? ' error' : '');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => t.classList.add('hidden'), isError ? 7000 : 3000);
}

// Reads an SSE response body: onEvent(json) for each data line until [DONE], then onRead() after
// each piece the network delivered (one redraw for the events that came together).
async function readSSE(res, onEvent, onRead) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buf += dec.decode(value, {stream: true});
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') { onRead(); return; }
        onEvent(JSON.parse(data));
      }
    }
    onRead();
  }
}

function showKeyBar() { $('#keybar').classList.remove('hidden'); }

// ---- Pages. The address's #name is the page: it is read on load and on every hashchange, and
// the tabs are links, so each switch is a history entry (Back returns to the previous page), a
// reload shows the same page and a bookmark opens it. Each page registers what to do when it is
// shown (load its data), so a page opened by reload or address has its data, not only one clicked.
const pageShowers = {};
function registerPage(name, show) { pageShowers[name] = show; }

function pageFromHash() {
  const name = decodeURIComponent(location.hash.slice(1));
  return /^[a-z]+$/.test(name) && $('#page-' + name) ? name : 'chat';
}

function showPage(name) {
  document.querySelectorAll('#tabs a').forEach(a => a.classList.toggle('active', a.dataset.page === name));
  document.querySelectorAll('.page').forEach(p => p.classList.toggle('active', p.id === 'page-' + name));
  const tab = $(`#tabs a[data-page="${name}"]`);
  document.title = name === 'chat' ? 'kvad' : `kvad · ${tab ? tab.textContent : name}`;
  kvad.page = name;
  kvad.emit('page', name);
  if (pageShowers[name]) pageShowers[name]();
  redrawCharts();  // its charts were last drawn at whatever width the window had then
}

// Goes to a page as a click on its tab does (a new history entry).
function go(name) {
  if (location.hash === '#' + name) showPage(name);
  else location.hash = name;  // hashchange shows it
}

// Kept in this browser: small results a page shows again after a reload.
function remember(key, value) {
  try { localStorage.setItem(key, JSON.stringify(value)); } catch (e) { /* full or disabled: not kept */ }
}
function recall(key) {
  try { return JSON.parse(localStorage.getItem(key)); } catch (e) { return null; }
}

async function refreshInfo() {
  try {
    const h = await fetch('/health').then(r => r.json());
    if (h.auth_required && !kvad.key) showKeyBar();
    kvad.info = await kvad.get('/kvad/info');
    const m = kvad.info.model;
    $('#model-label').textContent = m ? `${m.id} · ${m.architecture} · ${fmtCount(m.parameters)} params` : 'no model loaded';
    $('#model-label').title = m ? `context ${fmtInt(m.context_length)} tokens` : '';
    kvad.emit('info', kvad.info);
  } catch (e) {
    if (e.status !== 401) $('#model-label').textContent = 'server unreachable';
  }
}

async function pollEngine() {
  try {
    const s = await kvad.get('/kvad/stats');
    const dot = $('#engine-dot');
    dot.className = 'dot' + (s.engine.busy ? ' busy' : '');
    dot.title = s.engine.busy ? `engine busy: ${s.engine.busy}` : 'engine idle';
    kvad.stats = s;
    kvad.emit('stats', s);
  } catch (e) {
    $('#engine-dot').className = 'dot down';
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('#api-key').value = kvad.key;
  $('#api-key-save').addEventListener('click', () => {
    kvad.key = $('#api-key').value.trim();
    localStorage.setItem('kvad_api_key', kvad.key);
    $('#keybar').classList.add('hidden');
    refreshInfo();
  });
  window.addEventListener('hashchange', () => showPage(pageFromHash()));
  refreshInfo();
  pollEngine();
  setInterval(pollEngine, 1000);
  // After the other scripts' DOMContentLoaded handlers (registered after this one) have bound
  // their pages, so the first page shown finds its page ready.
  setTimeout(() => {
    if (!location.hash) history.replaceState(null, '', '#chat');
    showPage(pageFromHash());
  });
});
