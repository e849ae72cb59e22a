// kvad tokenize: the ids (and pieces) a model's tokenizer gives, for debugging and for checking
// against other tokenizers.
#include <cstdio>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "runtime/gguf_loader.h"

namespace kvad::cli {

void add_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "print the token ids of a text as a JSON array");
  struct Args {
    std::string model, text, file;
    bool special = false, pieces = false, no_parse_special = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-m,--model", a->model, "model folder or .gguf file (only its tokenizer is read)")->required();
  cmd->add_option("text", a->text, "text to tokenize");
  cmd->add_option("-f,--file", a->file, "read the text from a file (raw bytes)");
  cmd->add_flag("--special", a->special, "add the special tokens the tokenizer adds (e.g. BOS)");
  cmd->add_flag("--no-parse-special", a->no_parse_special, "treat special-token text like <|im_start|> as plain text");
  cmd->add_flag("--pieces", a->pieces, "also print each token's string");
  cmd->callback([a] {
    std::string dir = resolve_model_path(a->model);
    std::string tc = join_path(dir, "tokenizer_config.json");
    Tokenizer tok = is_gguf_path(dir) ? load_gguf_tokenizer(dir)
                                      : Tokenizer::load(join_path(dir, "tokenizer.json"), file_exists(tc) ? tc : "");
    if (!a->file.empty() && !a->text.empty()) fail("tokenize: give TEXT or --file, not both");
    std::string text = a->file.empty() ? a->text : read_file(a->file);
    std::vector<int32_t> ids = tok.encode(text, !a->no_parse_special, a->special);
    std::printf("%s\n", Json(ids).dump().c_str());
    if (a->pieces) {
      Json p = Json::array();
      for (int32_t id : ids) p.push_back(tok.piece(id));
      std::printf("%s\n", p.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    }
  });
}

}  // namespace kvad::cli
