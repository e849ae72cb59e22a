// Tokenizer: ties tokenizer.json's parts together in HF's order
//   added tokens (raw text) -> normalizer -> added tokens (normalised text) -> pre-tokenizer
//   -> model (BPE or Unigram) -> post-processor
// decodes through the decoder, and reads tokenizer_config.json for BOS/EOS and the chat template.
#include "tokenizer/tokenizer.h"

#include <functional>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unigram.h"

namespace kvad {

using tok::Field;
using tok::find_field;

namespace tok {
// Everything a loaded tokenizer holds (Tokenizer::Impl is this; it is private to the class, so the
// loading helpers below work on this name).
struct TokenizerData {
  Json config;
  tok::Normalizer normalizer;
  tok::PreTokenizer pretokenizer;
  tok::Decoder decoder;
  std::unique_ptr<tok::Model> model;
  tok::AddedVocab added;
  tok::StringMap<int32_t> added_by_content;

  // Per id: index into `entries` (-1 where no token has that id: vocabularies may have holes).
  struct Entry {
    std::string piece;  // as written in tokenizer.json
    std::string bytes;  // what it decodes to
    bool special = false;
  };
  std::vector<int32_t> slot;
  std::vector<Entry> entries;

  std::vector<int32_t> prefix, suffix;  // what add_special puts around the ids
  std::optional<int32_t> bos_id, eos_id;
  std::string bos, eos, chat_template;

  const Entry* entry(int32_t id) const {
    if (id < 0 || (size_t)id >= slot.size() || slot[id] < 0) return nullptr;
    return &entries[slot[id]];
  }
  Entry& entry_for(int32_t id) {
    if ((size_t)id >= slot.size()) slot.resize((size_t)id + 1, -1);
    if (slot[id] < 0) slot[id] = (int32_t)entries.size(), entries.emplace_back();
    return entries[slot[id]];
  }
  std::optional<int32_t> lookup(std::string_view piece) const {
    if (auto it = added_by_content.find(piece); it != added_by_content.end()) return it->second;
    if (const int32_t* id = model->vocab().find(piece)) return *id;
    return std::nullopt;
  }
};
}  // namespace tok

struct Tokenizer::Impl : tok::TokenizerData {};

namespace {

using Entry = tok::TokenizerData::Entry;

std::vector<tok::AddedToken> read_added_tokens(const Json& tj, const Field& doc) {
  std::vector<tok::AddedToken> out;
  const Json* list = find_field(tj, "added_tokens");
  if (!list) return out;
  Field lf = doc.at("added_tokens");
  if (!list->is_array()) lf.fail("expected an array, got {}", tok::json_type(*list));
  for (size_t i = 0; i < list->size(); i++) {
    const Json& a = (*list)[i];
    Field af = lf.at(i);
    tok::require_object(a, af);
    tok::AddedToken t;
    const Json* id = find_field(a, "id");
    if (!id) af.at("id").fail("missing");
    t.id = tok::read_id(*id, af.at("id"));
    const Json* content = find_field(a, "content");
    if (!content) af.at("content").fail("missing");
    t.content = tok::read_string(*content, af.at("content"));
    t.special = tok::read_bool(a, "special", false, af);
    t.single_word = tok::read_bool(a, "single_word", false, af);
    t.lstrip = tok::read_bool(a, "lstrip", false, af);
    t.rstrip = tok::read_bool(a, "rstrip", false, af);
    t.normalized = tok::read_bool(a, "normalized", !t.special, af);  // HF: special tokens default to raw
    out.push_back(std::move(t));
  }
  return out;
}

// "model": BPE or Unigram (HF tells them apart by the vocab's shape when "type" is missing).
// `read_aside`: what the parser took out of it (BPE's vocab object and merges), or nullptr.
std::unique_ptr<tok::Model> read_model(const Json& model, const Field& f, bool byte_level, tok::BpeTables* read_aside) {
  tok::require_object(model, f);
  std::string type = tok::read_string_or(model, "type", "", f);
  const Json* vocab = find_field(model, "vocab");
  if (type == "Unigram" || (type.empty() && vocab && vocab->is_array())) {
    // kvad's ByteLevel step leaves the byte alphabet to the model, which only BPE applies.
    if (byte_level) f.fail("a Unigram model after a ByteLevel pre-tokenizer is not supported");
    if (read_aside && read_aside->has_vocab) f.at("vocab").fail("expected an array of [piece, score], got object");
    return std::make_unique<tok::UnigramModel>(model, f);
  }
  return std::make_unique<tok::BpeModel>(model, f, byte_level, read_aside);  // refuses any other type
}

// Special-token ids a post-processor puts before and after a single sequence.
void read_post_processor(const Json* p, const Field& f, std::vector<int32_t>& prefix, std::vector<int32_t>& suffix,
                         size_t depth = 0) {
  if (!p) return;
  tok::require_object(*p, f);
  std::string type = tok::read_string_or(*p, "type", "", f);
  std::vector<int32_t> pre, post;
  if (type == "ByteLevel") {
    return;  // offsets only
  } else if (type == "Sequence") {
    const Json* list = find_field(*p, "processors");
    tok::check_sequence_depth(depth + 1, f);
    if (!list || !list->is_array()) f.at("processors").fail("expected an array");
    tok::check_step_count(list->size(), f.at("processors"));
    for (size_t i = 0; i < list->size(); i++)
      read_post_processor(&(*list)[i], f.at("processors").at(i), prefix, suffix, depth + 1);
    return;
  } else if (type == "TemplateProcessing") {
    const Json* single = find_field(*p, "single");
    const Json* specials = find_field(*p, "special_tokens");
    if (!single || !single->is_array()) f.at("single").fail("expected an array");
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); i++) {
      const Json& item = (*single)[i];
      Field itf = f.at("single").at(i);
      tok::require_object(item, itf);
      if (find_field(item, "Sequence")) {
        seen_sequence = true;
        continue;
      }
      const Json* st = find_field(item, "SpecialToken");
      if (!st) itf.fail("expected a SpecialToken or Sequence item");
      std::string name = tok::read_string_or(*st, "id", "", itf.at("SpecialToken"));
      // The ids come from the template's own special_tokens table, as in HF.
      const Json* def = specials ? find_field(*specials, name.c_str()) : nullptr;
      Field df = f.at("special_tokens").at(name);
      if (!def) df.fail("missing (used by single[{}])", i);
      const Json* ids = find_field(*def, "ids");
      if (!ids || !ids->is_array()) df.at("ids").fail("expected an array of ids");
      if (ids->size() > tok::kMaxPipelineSteps) df.at("ids").fail("more than {} ids", tok::kMaxPipelineSteps);
      for (size_t k = 0; k < ids->size(); k++) (seen_sequence ? post : pre).push_back(tok::read_id((*ids)[k], df.at("ids").at(k)));
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    // single = cls A sep; each given as [token, id].
    auto read_pair = [&](const char* key) {
      const Json* v = find_field(*p, key);
      if (!v || !v->is_array() || v->size() != 2) f.at(key).fail("expected [token, id]");
      return tok::read_id((*v)[1], f.at(key).at(1));
    };
    pre.push_back(read_pair("cls"));
    post.push_back(read_pair("sep"));
  } else {
    f.at("type").fail("post-processor '{}' is not supported", type);
  }
  // A later processor wraps what the earlier ones produced.
  prefix.insert(prefix.begin(), pre.begin(), pre.end());
  suffix.insert(suffix.end(), post.begin(), post.end());
  if (prefix.size() + suffix.size() > tok::kMaxPipelineSteps)
    f.fail("adds {} special tokens to every text (at most {})", prefix.size() + suffix.size(), tok::kMaxPipelineSteps);
}

// bos_token / eos_token in tokenizer_config: a string, {"content": ...} (AddedToken form) or null.
std::string read_config_token(const Json& cfg, const char* key, const Field& f) {
  const Json* v = find_field(cfg, key);
  if (!v) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return tok::read_string_or(*v, "content", "", f.at(key));
  f.at(key).fail("expected a string or an object with \"content\", got {}", tok::json_type(*v));
}

std::string read_chat_template(const Json& cfg, const Field& f) {
  const Json* v = find_field(cfg, "chat_template");
  if (!v) return "";
  if (v->is_string()) return v->get<std::string>();
  Field tf = f.at("chat_template");
  if (!v->is_array()) tf.fail("expected a string or a list of {{name, template}}, got {}", tok::json_type(*v));
  // Several named templates: the one used without a name is "default".
  for (size_t i = 0; i < v->size(); i++) {
    const Json& t = (*v)[i];
    tok::require_object(t, tf.at(i));
    if (tok::read_string_or(t, "name", "", tf.at(i)) == "default") return tok::read_string_or(t, "template", "", tf.at(i));
  }
  return "";
}

std::string config_name_for(const std::string& what) {
  const std::string suffix = "tokenizer.json";
  if (what.size() >= suffix.size() && what.compare(what.size() - suffix.size(), suffix.size(), suffix) == 0)
    return what.substr(0, what.size() - suffix.size()) + "tokenizer_config.json";
  return what + " (tokenizer_config)";
}

void build(tok::TokenizerData* impl, const Json& tj, const Json& tc, const std::string& what,
           const std::string& config_what, tok::BpeTables* read_aside = nullptr) {
  Field doc{what, ""};
  if (!tj.is_object()) doc.fail("expected a JSON object, got {}", tok::json_type(tj));
  const Json* model = find_field(tj, "model");
  if (!model) doc.at("model").fail("missing");

  impl->normalizer = tok::Normalizer::from_json(find_field(tj, "normalizer"), doc.at("normalizer"));
  impl->pretokenizer = tok::PreTokenizer::from_json(find_field(tj, "pre_tokenizer"), doc.at("pre_tokenizer"));
  bool byte_level = impl->pretokenizer.byte_level();
  impl->decoder = tok::Decoder::from_json(find_field(tj, "decoder"), doc.at("decoder"), byte_level);
  impl->model = read_model(*model, doc.at("model"), byte_level, read_aside);
  std::vector<tok::AddedToken> added = read_added_tokens(tj, doc);
  read_post_processor(find_field(tj, "post_processor"), doc.at("post_processor"), impl->prefix, impl->suffix);

  // Per-id tables: the model vocabulary first, then added tokens (which win for their id).
  impl->entries.reserve(impl->model->vocab().size() + added.size());
  impl->slot.reserve(impl->model->vocab().size() + added.size());
  for (const auto& [piece, id] : impl->model->vocab()) {
    Entry& e = impl->entry_for(id);
    if (!e.piece.empty() && e.piece < piece) continue;  // two pieces with one id: keep one, deterministically
    e.piece = piece;
    e.bytes = impl->decoder.token_bytes(piece, /*added=*/false);
  }
  for (const tok::AddedToken& t : added) {
    if (t.content.empty()) continue;
    Entry& e = impl->entry_for(t.id);
    e.piece = t.content;
    e.bytes = impl->decoder.token_bytes(t.content, /*added=*/true);
    e.special = t.special;
    impl->added_by_content[t.content] = t.id;
  }
  impl->added.build(std::move(added), impl->normalizer);
  for (int32_t id : impl->prefix)
    if (!impl->entry(id)) doc.at("post_processor").fail("adds token id {} which is not in the vocabulary", id);
  for (int32_t id : impl->suffix)
    if (!impl->entry(id)) doc.at("post_processor").fail("adds token id {} which is not in the vocabulary", id);

  // tokenizer_config.json
  impl->config = tc.is_null() ? Json::object() : tc;
  Field cf{config_what, ""};
  if (!impl->config.is_object()) cf.fail("expected a JSON object, got {}", tok::json_type(impl->config));
  impl->bos = read_config_token(impl->config, "bos_token", cf);
  impl->eos = read_config_token(impl->config, "eos_token", cf);
  if (!impl->bos.empty()) impl->bos_id = impl->lookup(impl->bos);
  if (!impl->eos.empty()) impl->eos_id = impl->lookup(impl->eos);
  if (impl->bos.empty() && !impl->prefix.empty()) {  // no config: the template's leading token
    impl->bos_id = impl->prefix.front();
    impl->bos = impl->entry(impl->prefix.front())->piece;
  }
  // transformers' Llama-style tokenizers rebuild the template from add_bos_token when it is given.
  if (const Json* add_bos = find_field(impl->config, "add_bos_token"); add_bos && impl->bos_id) {
    if (!add_bos->is_boolean()) cf.at("add_bos_token").fail("expected true or false, got {}", tok::json_type(*add_bos));
    bool starts_with_bos = !impl->prefix.empty() && impl->prefix.front() == *impl->bos_id;
    if (add_bos->get<bool>() && !starts_with_bos) impl->prefix.insert(impl->prefix.begin(), *impl->bos_id);
    if (!add_bos->get<bool>() && starts_with_bos) impl->prefix.erase(impl->prefix.begin());
  }
  impl->chat_template = read_chat_template(impl->config, cf);
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

// A JSON document parsed by `parse`; nlohmann's out_of_range for a number too large for a double
// ("1e999") becomes an error naming the document too.
Json parse_named(const std::function<Json()>& parse, const std::string& what) {
  try {
    return parse();
  } catch (const Json::exception& e) {
    fail("{}: invalid JSON: {}", what, e.what());
  }
}

void build_named(tok::TokenizerData* impl, const Json& tj, const Json& tc, const std::string& what,
                 const std::string& config_what, tok::BpeTables* read_aside) {
  try {
    build(impl, tj, tc, what, config_what, read_aside);
  } catch (const Json::exception& e) {  // a shape the explicit checks missed: still a clean error
    fail("{}: {}", what, e.what());
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& tokenizer_json_path, const std::string& tokenizer_config_path) {
  tok::BpeTables tables;
  tok::BpeTablesReader tables_reader(tables, tokenizer_json_path);
  Json tj = parse_named([&] { return read_json_file(tokenizer_json_path, {}, &tables_reader); }, tokenizer_json_path);
  Json tc = Json::object();
  if (!tokenizer_config_path.empty())
    tc = parse_named([&] { return read_json_file(tokenizer_config_path); }, tokenizer_config_path);
  auto impl = std::make_unique<Impl>();
  build_named(impl.get(), tj, tc, tokenizer_json_path,
              tokenizer_config_path.empty() ? "tokenizer_config.json" : tokenizer_config_path, &tables);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::parse(std::string_view tokenizer_json, const Json& tokenizer_config, const std::string& what) {
  tok::BpeTables tables;
  tok::BpeTablesReader tables_reader(tables, what);
  Json tj = parse_named([&] { return parse_json(tokenizer_json, what, {}, &tables_reader); }, what);
  auto impl = std::make_unique<Impl>();
  build_named(impl.get(), tj, tokenizer_config, what, config_name_for(what), &tables);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json(const Json& tokenizer_json, const Json& tokenizer_config, const std::string& what,
                               tok::BpeTables* bpe) {
  auto impl = std::make_unique<Impl>();
  build_named(impl.get(), tokenizer_json, tokenizer_config, what, config_name_for(what), bpe);
  return Tokenizer(std::move(impl));
}

namespace {
struct EncodeLimitReached {};  // unwinds out of the pre-tokenizer's callback once over max_tokens
}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, bool add_special,
                                       size_t max_tokens) const {
  const Impl& m = *impl_;
  std::string cleaned;
  if (!is_valid_utf8(text)) {
    cleaned = sanitize_utf8(text);
    text = cleaned;
  }
  std::vector<int32_t> out;
  if (add_special) out = m.prefix;
  auto over = [&] { return out.size() > max_tokens; };
  auto model = [&](std::string_view word) {
    m.model->encode(word, out);
    if (over()) throw EncodeLimitReached{};
  };
  auto limited = [&] {
    out.resize(max_tokens + 1);
    return out;
  };
  if (over()) return limited();

  std::vector<tok::Span> raw, normed;
  m.added.split(text, /*normalized_kind=*/false, parse_special, raw);
  for (const tok::Span& s : raw) {
    if (s.id >= 0) {
      out.push_back(s.id);
      if (over()) return limited();
      continue;
    }
    std::string_view piece = text.substr(s.start, s.end - s.start);
    std::string normalized;
    if (m.normalizer.active()) {
      normalized = m.normalizer.apply(piece);
      piece = normalized;
    }
    normed.clear();
    m.added.split(piece, /*normalized_kind=*/true, parse_special, normed);
    for (const tok::Span& n : normed) {
      if (n.id >= 0) {
        out.push_back(n.id);
      } else {
        try {
          bool at_start = s.start == 0 && n.start == 0;  // for Metaspace's prepend_scheme "first"
          m.pretokenizer.run(piece.substr(n.start, n.end - n.start), at_start, model);
        } catch (const EncodeLimitReached&) {
          return limited();
        }
      }
      if (over()) return limited();
    }
  }
  if (add_special) out.insert(out.end(), m.suffix.begin(), m.suffix.end());
  if (over()) return limited();
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  static const std::string none;
  const Entry* e = impl_->entry(id);
  return e ? e->bytes : none;
}

namespace {
// Drops up to `count` copies of `text` from the start of `bytes`; returns how many it dropped.
size_t strip_leading(std::string& bytes, const std::string& text, size_t count) {
  size_t n = 0, at = 0;
  while (n < count && bytes.compare(at, text.size(), text) == 0) at += text.size(), n++;
  bytes.erase(0, at);
  return n;
}
}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    const Entry* e = impl_->entry(id);
    if (!e || (skip_special && e->special)) continue;  // HF skips ids it has no token for
    bytes += e->bytes;
  }
  strip_leading(bytes, impl_->decoder.strip_text(), impl_->decoder.strip_count());
  return is_valid_utf8(bytes) ? bytes : sanitize_utf8(bytes);
}

int32_t Tokenizer::vocab_size() const { return (int32_t)impl_->slot.size(); }

std::optional<int32_t> Tokenizer::token_id(std::string_view piece) const { return impl_->lookup(piece); }

const std::string& Tokenizer::piece(int32_t id) const {
  static const std::string none;
  const Entry* e = impl_->entry(id);
  return e ? e->piece : none;
}

bool Tokenizer::is_special(int32_t id) const {
  const Entry* e = impl_->entry(id);
  return e && e->special;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }
const std::string& Tokenizer::bos_token() const { return impl_->bos; }
const std::string& Tokenizer::eos_token() const { return impl_->eos; }
bool Tokenizer::adds_bos() const {
  return impl_->bos_id && !impl_->prefix.empty() && impl_->prefix.front() == *impl_->bos_id;
}
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const Json& Tokenizer::config() const { return impl_->config; }

// ---- streaming ------------------------------------------------------------------------------

const std::string& Tokenizer::decode_strip_text() const { return impl_->decoder.strip_text(); }
size_t Tokenizer::decode_strip_count() const { return impl_->decoder.strip_count(); }

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special), strip_left_(tok.decode_strip_count()) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return "";
  pending_ += tok_.token_bytes(id);
  if (strip_left_ > 0) {
    // The start of the text, as decode() strips it: wait until it is known not to be stripped.
    const std::string& s = tok_.decode_strip_text();
    strip_left_ -= strip_leading(pending_, s, strip_left_);
    if (pending_.empty() || (pending_.size() < s.size() && s.compare(0, pending_.size(), pending_) == 0)) return "";
    strip_left_ = 0;
  }
  size_t n = utf8_complete_prefix(pending_);
  std::string out = sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace kvad
