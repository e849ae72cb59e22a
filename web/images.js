// Images: text to image with the server's painters (/kvad/images/models, /kvad/images). The
// request streams an event per step (progress, ETA, a preview of the image so far), then each
// finished PNG, which joins the gallery with its parameters, a download link and "Use seed".
'use strict';

const images = {models: [], abort: null, shown: new Set()};

async function loadImageModels() {
  const r = await kvad.get('/kvad/images/models');
  images.models = r.models;
  const sel = $('#images-model');
  const keep = sel.value;
  sel.replaceChildren(...r.models.map(m => el('option', {value: m.id}, `${m.id} (${m.kind === 'sdxl' ? 'SDXL' : 'SD 1.5'})`)));
  if (keep && r.models.some(m => m.id === keep)) sel.value = keep;
  $('#images-none').classList.toggle('hidden', r.models.length > 0);
  $('#images-start').disabled = r.models.length === 0;
  imageModelChosen();
}

// Sizes step by the model's multiple and start at its native size.
function imageModelChosen() {
  const m = images.models.find(x => x.id === $('#images-model').value);
  if (!m) return;
  for (const id of ['#images-width', '#images-height']) {
    const input = $(id);
    input.step = m.size_multiple;
    input.min = m.size_multiple;
    if (!input.value || input.value % m.size_multiple) input.value = m.default_size;
  }
}

function imageRequest() {
  const body = {
    model: $('#images-model').value,
    prompt: $('#images-prompt').value,
    size: `${$('#images-width').value}x${$('#images-height').value}`,
    steps: Number($('#images-steps').value),
    guidance_scale: Number($('#images-guidance').value),
    sampler: $('#images-sampler').value,
    n: Number($('#images-n').value),
    previews: true,
  };
  if ($('#images-negative').value) body.negative_prompt = $('#images-negative').value;
  if ($('#images-seed').value !== '') body.seed = Number($('#images-seed').value);
  return body;
}

function fmtSeconds(s) { return s >= 60 ? `${Math.floor(s / 60)} min ${Math.round(s % 60)} s` : `${s.toFixed(1)} s`; }

// One image in the gallery (newest first): {id, prompt, width, height, seed, parameters, src}, with
// timings when it was painted in this page.
function addToGallery(e, timings) {
  if (images.shown.has(e.id)) return;
  images.shown.add(e.id);
  const settings = e.parameters.split('\n').filter(l => l.startsWith('Steps:')).join('');
  const useSeed = el('button', {type: 'button', class: 'small', onclick: () => { $('#images-seed').value = e.seed; }}, 'Use seed');
  const figure = el('figure', {class: 'painted', 'data-id': e.id},
    el('img', {src: e.src, alt: e.prompt, width: e.width, height: e.height}),
    el('figcaption', {}, `${e.prompt} — ${e.width}×${e.height}, seed ${e.seed}`, el('br'),
      el('span', {class: 'muted small'}, settings), el('br'),
      timings ? el('span', {class: 'muted small'}, `text ${fmtSeconds(timings.text_encode_seconds)}, denoise ${fmtSeconds(timings.denoise_seconds)}, decode ${fmtSeconds(timings.decode_seconds)} `) : null,
      el('a', {href: e.src, download: `kvad-${e.seed}.png`}, 'Download'), ' ', useSeed));
  // Keep newest first whatever order they arrive in.
  const later = [...$('#images-gallery').children].find(f => Number(f.dataset.id) < e.id);
  $('#images-gallery').insertBefore(figure, later || null);
}

// The images the server painted since it started (other tabs' and clients' too), PNGs fetched with
// the key (an <img> cannot send it).
async function loadGallery() {
  const r = await kvad.get('/kvad/images/gallery');
  for (const g of r.images.slice().reverse()) {
    if (images.shown.has(g.id)) continue;
    const res = await fetch(g.url, {headers: kvad.headers(false)});
    if (!res.ok) continue;  // dropped from the server's gallery meanwhile
    addToGallery({...g, src: URL.createObjectURL(await res.blob())});
  }
}

async function paint(e) {
  e.preventDefault();
  const req = imageRequest();
  if (!req.prompt.trim()) { toast('Write what to paint first', true); return; }
  images.abort = new AbortController();
  $('#images-start').disabled = true;
  $('#images-stop').classList.remove('hidden');
  $('#images-progress').classList.remove('hidden');
  $('#images-status').textContent = 'Encoding the prompt…';
  $('#images-bar').value = 0;
  $('#images-preview').removeAttribute('src');
  try {
    const res = await fetch('/kvad/images', {method: 'POST', headers: kvad.headers(true), body: JSON.stringify(req), signal: images.abort.signal});
    if (!res.ok) {
      if (res.status === 401) showKeyBar();
      const data = await res.json().catch(() => null);
      throw new Error(data && data.error ? data.error.message : `HTTP ${res.status}`);
    }
    await readSSE(res, ev => {
      if (ev.error) throw new Error(ev.error.message);
      if (ev.step) {
        const of = req.n > 1 ? `image ${ev.image + 1} of ${req.n}, ` : '';
        $('#images-bar').value = ev.step / ev.total;
        $('#images-status').textContent = `${of}step ${ev.step} of ${ev.total}, ${fmtSeconds(ev.seconds)} so far, about ${fmtSeconds(ev.eta_seconds)} left`;
        if (ev.preview) $('#images-preview').src = 'data:image/png;base64,' + ev.preview;
      } else if (ev.png) {
        addToGallery({id: ev.gallery_id, prompt: ev.prompt, width: ev.width, height: ev.height, seed: ev.seed,
                      parameters: ev.parameters, src: 'data:image/png;base64,' + ev.png}, ev.timings);
      } else if (ev.done) {
        $('#images-status').textContent = 'Done';
      }
    }, () => {});
  } catch (err) {
    if (err.name === 'AbortError') $('#images-status').textContent = 'Stopped';
    else toast(err.message, true);
  } finally {
    images.abort = null;
    $('#images-start').disabled = images.models.length === 0;
    $('#images-stop').classList.add('hidden');
  }
}

registerPage('images', () => Promise.all([loadImageModels(), loadGallery()]).catch(err => toast(err.message, true)));

document.addEventListener('DOMContentLoaded', () => {
  $('#images-form').addEventListener('submit', paint);
  $('#images-stop').addEventListener('click', () => images.abort && images.abort.abort());
  $('#images-model').addEventListener('change', imageModelChosen);
});
