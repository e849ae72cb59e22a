// Models page: what kvad can run, load one, chat with one, remove one from the store.
'use strict';

// Loads a model; true when it is loaded. While the request waits the toast says how far the load
// has got (GET /kvad/models/loading): a first q8 load of a large model quantises for minutes.
async function loadModel(name) {
  toast(`Loading ${name}…`);
  let waiting = true;
  const poll = setInterval(async () => {
    let p;
    try { p = await kvad.get('/kvad/models/loading'); } catch (e) { return; }  // the load's answer reports failures
    if (waiting && p.name && p.total)
      toast(`Loading ${name}… ${p.stage}: ${Math.floor(100 * p.done / p.total)}% (${p.done} of ${p.total} ${p.unit})`);
  }, 500);
  try {
    await kvad.post('/kvad/models/load', {name});
    waiting = false;
    toast(`Loaded ${name}`);
    await refreshInfo();
    if (kvad.page === 'models') renderModels();
    return true;
  } catch (e) { waiting = false; toast(e.message, true); return false; }
  finally { waiting = false; clearInterval(poll); }
}

// Whether the loaded model is the one named (a store name, a folder, or the id it is served as).
function isLoaded(name) {
  const m = kvad.info && kvad.info.model;
  return !!m && (m.name === name || m.path === name || m.id === name);
}

// "Chat with it": loads the model unless it is the loaded one, then opens the Chat page.
async function chatWith(name) {
  if (!isLoaded(name) && !(await loadModel(name))) return;
  go('chat');
  $('#chat-input').focus();
}

async function renderModels() {
  const tbody = $('#models-table tbody');
  let r;
  try { r = await kvad.get('/kvad/models'); } catch (e) { toast(e.message, true); return; }
  tbody.innerHTML = '';
  if (!r.models.length) tbody.append(el('tr', {}, el('td', {colspan: 9, class: 'muted'}, 'No models found. Download one with kvad pull ORG/NAME (e.g. kvad pull Qwen/Qwen2.5-0.5B-Instruct), train one on the Training page, start the server with --models-dir DIR for a folder of models, or load a folder or .gguf by its path below.')));
  for (const m of r.models) {
    const actions = el('td', {class: 'actions'});
    if (m.loaded) actions.append(el('span', {class: 'muted small'}, 'loaded'));
    else if (m.supported) actions.append(el('button', {class: 'secondary', onclick: () => loadModel(m.name)}, 'Load'));
    if (m.supported) actions.append(el('button', {class: 'chat-with', onclick: () => (m.loaded ? go('chat') : chatWith(m.name))}, 'Chat with it'));
    if ((m.source === 'store' || m.source === 'hf') && !m.loaded)
      actions.append(el('button', {class: 'danger', onclick: async () => {
        if (!confirm(`Remove ${m.name} from ${m.source === 'hf' ? 'the Hugging Face cache' : "kvad's store"}? Its files are deleted.`)) return;
        try { await kvad.del('/kvad/models/' + encodeURIComponent(m.name)); toast(`Removed ${m.name}`); renderModels(); }
        catch (e) { toast(e.message, true); }
      }}, 'Remove'));
    const name = el('td', {}, m.name.split('/').pop(), el('div', {class: 'muted small'}, m.path),
      el('div', {class: 'muted small phone-only'}, [m.architecture || '?', m.parameters ? fmtCount(m.parameters) + ' params' : '', m.format, m.source].filter(Boolean).join(' · ')));
    if (m.problem) name.append(el('div', {class: 'small', style: 'color: var(--danger)'}, m.problem));
    tbody.append(el('tr', {class: m.loaded ? 'loaded' : ''},
      name,
      el('td', {class: 'wide-only'}, m.source),
      el('td', {class: 'wide-only'}, m.architecture || '?'),
      el('td', {class: 'num wide-only'}, fmtCount(m.parameters)),
      el('td', {class: 'num'}, fmtBytes(m.bytes)),
      el('td', {class: 'wide-only'}, m.format || '?'),
      el('td', {class: 'num wide-only'}, m.context_length ? fmtInt(m.context_length) : '?'),
      el('td', {class: 'wide-only'}, m.chat ? 'yes' : 'no'),
      actions));
  }
  renderPull(r.pull);
}

let pullTimer = null;
function renderPull(p) {
  const running = p.state === 'running';
  $('#pull-start').disabled = running;
  $('#pull-cancel').classList.toggle('hidden', !running);
  $('#pull-state').textContent = p.name ? `${p.name}: ${p.state}${p.state === 'failed' ? ` (exit ${p.exit_code})` : ''}` : '';
  $('#pull-log').classList.toggle('hidden', !p.log || !p.log.length);
  $('#pull-log').textContent = (p.log || []).join('\n');
  if (running && !pullTimer) pullTimer = setInterval(pollPull, 1000);
  if (!running && pullTimer) { clearInterval(pullTimer); pullTimer = null; renderModels(); fillModelPicker(); }
}
async function pollPull() {
  try { renderPull(await kvad.get('/kvad/models/pull')); } catch (e) { clearInterval(pullTimer); pullTimer = null; }
}

registerPage('models', renderModels);

document.addEventListener('DOMContentLoaded', () => {
  kvad.on('trained', () => { renderModels(); fillModelPicker(); });
  $('#pull-form').addEventListener('submit', async ev => {
    ev.preventDefault();
    const name = $('#pull-repo').value.trim();
    if (!name) return;
    try { renderPull(await kvad.post('/kvad/models/pull', {name})); pollPull(); } catch (e) { toast(e.message, true); }
  });
  $('#pull-cancel').addEventListener('click', async () => { try { renderPull(await kvad.post('/kvad/models/pull/cancel')); } catch (e) { toast(e.message, true); } });
  $('#load-form').addEventListener('submit', ev => {
    ev.preventDefault();
    const name = $('#load-path').value.trim();
    if (name) loadModel(name);
  });
});
