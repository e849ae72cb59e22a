// Prompt -> the UNet's conditioning, as diffusers' encode_prompt builds it for classifier-free
// guidance: one batch of 2 rows, the negative (unconditional) row FIRST, then the prompt
// (eps = uncond + g * (text - uncond) later reads them in that order).
//   SD 1.5: context = text_encoder(ids).last_hidden_state            [2, 77, hidden]
//   SDXL:   context = cat(te1 penultimate, te2 penultimate) on features  [2, 77, h1 + h2]
//           pooled  = te2 text_embeds (pooled x text_projection)         [2, projection]
//           no negative given and force_zeros_for_empty_prompt: the negative row of both is all
//           zeros; a negative given ("" included) is encoded like the prompt.
// SD 1.5 with no negative encodes "" (diffusers' uncond_tokens = [""]).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "image/clip_text.h"
#include "image/pipeline_config.h"
#include "tokenizer/clip.h"

namespace kvad::image {

// The text half of a pipeline: its tokenizer(s) and text encoder(s), loaded from the folder.
struct PromptEncoder {
  PipelineKind kind = PipelineKind::SD15;
  bool force_zeros_for_empty_prompt = true;
  std::vector<tok::ClipTokenizer> tokenizers;  // tokenizer, tokenizer_2 (SDXL)
  std::vector<ClipTextEncoder> encoders;       // text_encoder, text_encoder_2 (SDXL)

  // `weights`: the encoders' weights when they come from elsewhere (a single file's parts, in
  // text_encoder, text_encoder_2 order); empty: each encoder's own folder. Configs and tokenizers
  // always come from the folder.
  // `fmt`: the encoders' matrices (AsStored keeps the file's f32 / bf16 in place).
  static PromptEncoder load(const PipelineFolder& p, const std::vector<std::shared_ptr<Checkpoint>>& weights = {},
                            WeightFormat fmt = WeightFormat::AsStored);
};

struct Conditioning {
  int64_t batch = 2, tokens = 0, width = 0;
  std::vector<float> context;  // [batch, tokens, width]: row 0 the negative, row 1 the prompt
  int64_t pooled_width = 0;    // SDXL only (0 for SD 1.5)
  std::vector<float> pooled;   // [batch, pooled_width]
};

Conditioning encode_prompt(const PromptEncoder& enc, const std::string& prompt,
                           const std::optional<std::string>& negative);

}  // namespace kvad::image
