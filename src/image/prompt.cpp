// encode_prompt (prompt.h): diffusers 0.25.1 StableDiffusionPipeline.encode_prompt and
// StableDiffusionXLPipeline.encode_prompt with clip_skip unset.
#include "image/prompt.h"

#include "core/fs.h"

#include "core/error.h"

namespace kvad::image {

PromptEncoder PromptEncoder::load(const PipelineFolder& p, const std::vector<std::shared_ptr<Checkpoint>>& weights,
                                  WeightFormat fmt) {
  PromptEncoder e;
  e.kind = p.kind;
  e.force_zeros_for_empty_prompt = p.force_zeros_for_empty_prompt;
  std::vector<std::pair<const char*, const char*>> parts = {{"tokenizer", "text_encoder"}};
  if (p.kind == PipelineKind::SDXL) parts.push_back({"tokenizer_2", "text_encoder_2"});
  for (auto [tok_part, enc_part] : parts) {
    e.tokenizers.push_back(tok::ClipTokenizer::from_folder(p.part(tok_part).dir));
    const size_t i = e.encoders.size();
    if (i < weights.size() && weights[i]) {
      std::string cfg = join_path(p.part(enc_part).dir, "config.json");
      e.encoders.emplace_back(parse_clip_text_config(read_json_file(cfg), cfg), weights[i], fmt);
    } else {
      e.encoders.push_back(ClipTextEncoder::load(p.part(enc_part).dir, fmt));
    }
    const auto& t = e.tokenizers.back();
    const auto& c = e.encoders.back().config();
    if (t.max_length() > c.positions)
      fail("{}: the tokenizer pads to {} tokens, more than the encoder's {} positions", c.source, t.max_length(), c.positions);
    if ((int64_t)t.vocab_size() > c.vocab)
      fail("{}: the tokenizer has {} entries, more than the encoder's vocab_size {}", c.source, t.vocab_size(), c.vocab);
  }
  if (p.kind == PipelineKind::SDXL) {
    if (!e.encoders[1].config().with_projection)
      fail("{}: SDXL's second text encoder must be a CLIPTextModelWithProjection", e.encoders[1].config().source);
    if (e.tokenizers[0].max_length() != e.tokenizers[1].max_length())
      fail("{}: the two tokenizers pad to different lengths ({} and {})", p.dir, e.tokenizers[0].max_length(),
           e.tokenizers[1].max_length());
  }
  return e;
}

namespace {

// One text's row: the context [tokens, width] and (SDXL) the pooled vector.
void encode_row(const PromptEncoder& enc, const std::string& text, std::vector<float>& context,
                std::vector<float>& pooled) {
  if (enc.kind == PipelineKind::SD15) {
    ClipTextOutput o = enc.encoders[0].encode(enc.tokenizers[0].encode_padded(text));
    context.insert(context.end(), o.last_hidden_state.begin(), o.last_hidden_state.end());
    return;
  }
  ClipTextOutput a = enc.encoders[0].encode(enc.tokenizers[0].encode_padded(text));
  ClipTextOutput b = enc.encoders[1].encode(enc.tokenizers[1].encode_padded(text));
  for (int64_t t = 0; t < a.tokens; t++) {
    context.insert(context.end(), a.penultimate.begin() + t * a.hidden, a.penultimate.begin() + (t + 1) * a.hidden);
    context.insert(context.end(), b.penultimate.begin() + t * b.hidden, b.penultimate.begin() + (t + 1) * b.hidden);
  }
  pooled.insert(pooled.end(), b.text_embeds.begin(), b.text_embeds.end());
}

}  // namespace

Conditioning encode_prompt(const PromptEncoder& enc, const std::string& prompt, const std::optional<std::string>& negative) {
  if (enc.encoders.empty()) fail("encode_prompt: no text encoder loaded");
  Conditioning c;
  c.tokens = enc.tokenizers[0].max_length();
  c.width = enc.encoders[0].config().hidden;
  if (enc.kind == PipelineKind::SDXL) {
    c.width += enc.encoders[1].config().hidden;
    c.pooled_width = enc.encoders[1].config().projection;
  }
  std::vector<float> ctx, pooled;
  encode_row(enc, prompt, ctx, pooled);
  if (enc.kind == PipelineKind::SDXL && !negative && enc.force_zeros_for_empty_prompt) {
    c.context.assign(ctx.size(), 0.0f);  // zeros_like(prompt_embeds), zeros_like(pooled)
    c.pooled.assign(pooled.size(), 0.0f);
  } else {
    encode_row(enc, negative.value_or(""), c.context, c.pooled);
  }
  c.context.insert(c.context.end(), ctx.begin(), ctx.end());
  c.pooled.insert(c.pooled.end(), pooled.begin(), pooled.end());
  return c;
}

}  // namespace kvad::image
