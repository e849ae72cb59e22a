// Dashboard: live figures from /kvad/stats (polled each second by app.js), memory drawn over time.
'use strict';

const dash = {t0: performance.now(), mem: [], speed: [], lastGen: -1};

// Every poll: the figures' history (for the charts), and the page when it is shown.
function recordStats(s) {
  const last = s.last, tot = s.totals;
  const t = (performance.now() - dash.t0) / 1000;
  dash.mem.push([t, s.rss_bytes, s.kv_bytes, s.weight_bytes]);
  if (dash.mem.length > 600) dash.mem.shift();
  if (tot.generations !== dash.lastGen) {
    if (dash.lastGen >= 0 && last.decode_tok_s > 0) dash.speed.push([t, last.decode_tok_s, last.prefill_tok_s]);
    dash.lastGen = tot.generations;
    if (dash.speed.length > 200) dash.speed.shift();
  }
  if (kvad.page === 'dashboard') renderDashboard(s);
}

// Models with recurrent layers (Qwen3-Next): a fixed state per sequence instead of per position,
// and the snapshots that let a repeated prompt start resume part-way.
function recurrentCards(r) {
  if (!r || !r.bytes_per_sequence) return [];
  const snaps = r.snapshot_every ? `${fmtInt(r.snapshots)} snapshots kept (one every ${fmtInt(r.snapshot_every)} positions, ${fmtBytes(r.snapshots * r.bytes_per_sequence)})` : 'no snapshots (--snapshot-every 0)';
  return [card('Recurrent state per sequence', fmtBytes(r.bytes_per_sequence), `the same at every length; ${fmtInt(r.sequences)} sequences hold one; ${snaps}`)];
}

function renderDashboard(s) {
  if (!s) return;  // no figures yet: the first poll draws the page
  const m = s.model;
  const last = s.last, tot = s.totals;
  const cards = $('#dash-cards');
  cards.innerHTML = '';
  cards.append(
    card('Resident memory (RSS)', fmtBytes(s.rss_bytes), 'the whole server process'),
    card('Weights', fmtBytes(s.weight_bytes), m ? `${m.weight_format}, ${fmtCount(m.parameters)} parameters` : 'no model'),
    card('KV cache held now', fmtBytes(s.kv_bytes), `${fmtInt(s.kv_tokens)} positions in ${s.engine.in_flight ? 'use' : 'kept'} sessions`),
    card('Same conversation at full context', fmtBytes(s.kv_bytes_full_context), `${fmtInt(s.context_length)} positions × ${fmtBytes(s.kv_bytes_per_token)}`),
    card('KV bytes per token', fmtBytes(s.kv_bytes_per_token), m ? `${m.kv_per_token} (${s.kv_type})` : ''),
    ...recurrentCards(s.recurrent_state),
    card('Cached tokens, last request', fmtInt(last.cached_tokens), `of ${fmtInt(last.prompt_tokens)} prompt tokens`),
    card('Decode', fmtNum(last.decode_tok_s) + ' tok/s', `last answer; all answers ${fmtNum(tot.decode_tok_s)} tok/s`),
    card('Prefill', fmtNum(last.prefill_tok_s) + ' tok/s', `last prompt; first token after ${fmtNum(last.ttft_s, 2)} s`),
    card('Requests', fmtInt(tot.generations), `${fmtInt(tot.completion_tokens)} tokens out, ${fmtInt(tot.busy_rejections)} refused busy`),
    card('Engine', s.engine.busy || 'idle', `${s.engine.threads} threads, ${s.streams_active} streams open`),
  );
  const t = (performance.now() - dash.t0) / 1000;
  const x0 = dash.mem.length ? dash.mem[0][0] : 0;
  lineChart($('#dash-mem'), [
    {name: 'RSS (MB)', points: dash.mem.map(p => [p[0] - x0, p[1] / 1e6])},
    {name: 'weights (MB)', points: dash.mem.map(p => [p[0] - x0, p[3] / 1e6])},
    {name: 'KV cache (MB)', points: dash.mem.map(p => [p[0] - x0, p[2] / 1e6])},
  ], {xlabel: 'seconds'});
  lineChart($('#dash-speed'), [
    {name: 'decode tok/s', points: dash.speed.map(p => [p[0] - x0, p[1]])},
    {name: 'prefill tok/s', points: dash.speed.map(p => [p[0] - x0, p[2]])},
  ], {xlabel: 'seconds', scatter: true, xmax: Math.max(1, t - x0)});
  $('#dash-note').textContent = m ? `${m.id}: context ${fmtInt(m.context_length)} tokens${m.context_length !== m.model_context_length ? ` (capped from ${fmtInt(m.model_context_length)})` : ''}, loaded in ${fmtNum(m.load_seconds, 2)} s.` : 'No model loaded.';
}

registerPage('dashboard', () => renderDashboard(kvad.stats));
kvad.on('stats', recordStats);
