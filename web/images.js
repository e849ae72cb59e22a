// Images: text to image with the server's painters (/kvad/images/models, /kvad/images). The
// request streams an event per step (progress, ETA, a preview of the image so far), then each
// finished PNG, which joins the gallery with its parameters, a download link and "Use seed".
'use strict';

const images = {models: [], abort: null};

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

function addToGallery(ev, req) {
  const src = 'data:image/png;base64,' + ev.png;
  const t = ev.timings;
  const caption = `${req.prompt} — ${ev.width}×${ev.height}, ${req.steps} steps, ${req.sampler === 'euler_a' ? 'Euler ancestral' : 'Euler'}, guidance ${req.guidance_scale}, seed ${ev.seed}`;
  const useSeed = el('button', {type: 'button', class: 'small', onclick: () => { $('#images-seed').value = ev.seed; }}, 'Use seed');
  const figure = el('figure', {class: 'painted'},
    el('img', {src, alt: req.prompt, width: ev.width, height: ev.height}),
    el('figcaption', {}, caption, el('br'),
      el('span', {class: 'muted small'}, `text ${fmtSeconds(t.text_encode_seconds)}, denoise ${fmtSeconds(t.denoise_seconds)}, decode ${fmtSeconds(t.decode_seconds)}`), ' ',
      el('a', {href: src, download: `kvad-${ev.seed}.png`}, 'Download'), ' ', useSeed));
  $('#images-gallery').prepend(figure);
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
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!line.startsWith('data: ')) continue;
        const ev = JSON.parse(line.slice(6));
        if (ev.error) throw new Error(ev.error.message);
        if (ev.step) {
          const of = req.n > 1 ? `image ${ev.image + 1} of ${req.n}, ` : '';
          $('#images-bar').value = ev.step / ev.total;
          $('#images-status').textContent = `${of}step ${ev.step} of ${ev.total}, ${fmtSeconds(ev.seconds)} so far, about ${fmtSeconds(ev.eta_seconds)} left`;
          if (ev.preview) $('#images-preview').src = 'data:image/png;base64,' + ev.preview;
        } else if (ev.png) {
          addToGallery(ev, req);
        } else if (ev.done) {
          $('#images-status').textContent = 'Done';
        }
      }
    }
  } catch (err) {
    if (err.name === 'AbortError') $('#images-status').textContent = 'Stopped';
    else toast(err.message, true);
  } finally {
    images.abort = null;
    $('#images-start').disabled = images.models.length === 0;
    $('#images-stop').classList.add('hidden');
  }
}

registerPage('images', () => loadImageModels().catch(err => toast(err.message, true)));

document.addEventListener('DOMContentLoaded', () => {
  $('#images-form').addEventListener('submit', paint);
  $('#images-stop').addEventListener('click', () => images.abort && images.abort.abort());
  $('#images-model').addEventListener('change', imageModelChosen);
});
