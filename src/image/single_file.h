// A single-file Stable Diffusion checkpoint in Stability's original layout (the way most
// fine-tunes are published: one `.safetensors` holding the UNet as `model.diffusion_model.*`, the
// VAE as `first_stage_model.*`, the text encoder(s) as `cond_stage_model.transformer.*` (SD 1.5)
// or `conditioner.embedders.{0,1}.*` (SDXL: CLIP ViT-L in transformers' layout, OpenCLIP bigG in
// its own)), seen as one Checkpoint per part under diffusers' names, so the same loaders
// (Unet, Vae, ClipTextEncoder) read a folder and a single file alike.
//
// No tensor is copied: each view points into the file's mapping. Three spots are not a pure
// renaming: the VAE's mid-block attention stores 1x1 convolutions [c, c, 1, 1] where diffusers has
// linear [c, c] (same bytes, shape dropped); OpenCLIP fuses q, k, v into in_proj_weight [3H, H]
// (three row slices of it); and keeps text_projection as [H, P] where transformers' Linear is
// [P, H] (a transposed view). A file carries no configs: the sizes and the block layout come from
// the base pipeline's folder (its unet/ and vae/ config.json).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "image/pipeline_config.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace kvad::image {

// One part of a single file under diffusers' names.
class PartCheckpoint : public Checkpoint {
 public:
  // `keep` holds the memory the views point into (the mapped file); `source` names it in errors.
  // `file_mapped`: the views point into a MappedFile, whose pages release() may drop.
  PartCheckpoint(std::shared_ptr<const void> keep, const std::string& source, const std::string& part,
                 bool file_mapped = false);
  void release(const TensorView& t) const override {
    if (file_mapped_) release_mapped_pages(t.data, t.nbytes);
  }
  void add(const std::string& name, TensorView view);
  std::vector<std::string> names() const override;
  size_t size() const { return tensors_.size(); }

 protected:
  const TensorView* lookup(const std::string& name) const override;

 private:
  std::shared_ptr<const void> keep_;  // the mapping the views point into
  bool file_mapped_ = false;
  std::map<std::string, TensorView> tensors_;
};

// What the renaming needs to know of the UNet and VAE block layout (from the base's configs).
struct SingleFileLayout {
  int64_t unet_levels = 4, unet_layers_per_block = 2;
  std::vector<bool> unet_down_attention, unet_up_attention;  // per level: a CrossAttn block
  int64_t vae_levels = 4;
};
SingleFileLayout layout_from_base(const PipelineFolder& base);

// SD 1.5 (cond_stage_model.transformer.*) or SDXL (conditioner.embedders.*); anything else (SD 2's
// OpenCLIP-only cond_stage_model.model.*, a UNet-only or VAE-only file, a LoRA) is refused naming
// what was found.
PipelineKind detect_single_file(const std::vector<TensorView>& tensors, const std::string& what);
inline PipelineKind detect_single_file(const SafetensorsFile& f) { return detect_single_file(f.tensors(), f.path()); }

struct SingleFile {
  std::string path;
  PipelineKind kind = PipelineKind::SD15;
  std::shared_ptr<PartCheckpoint> unet, vae, text_encoder, text_encoder_2;  // text_encoder_2: SDXL
  // After the parts are loaded: every tensor of every part was read (the unread-tensor guard).
  void check_all_read() const;
};

// Every tensor of the file is placed in a part or is one of the training-time leftovers known to
// carry no weights for inference (the noise schedule's buffers, `model_ema.*`, position_ids,
// logit_scale); any other name is an error naming it, never silently dropped.
SingleFile open_single_file(const std::string& path, const SingleFileLayout& layout);
// The same over tensors already parsed (a file's, or bytes parsed in memory by the fuzzer); `keep`
// holds what they point into, `what` names it in errors.
// `file_mapped`: `keep` is a mapped file (SafetensorsFile), so loads may release its pages.
SingleFile place_tensors(const std::vector<TensorView>& tensors, std::shared_ptr<const void> keep, const std::string& what,
                         const SingleFileLayout& layout, bool file_mapped = false);

}  // namespace kvad::image
