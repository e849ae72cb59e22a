// CLIP's tokenizer (clip.h). Mirrors transformers 4.31's tokenization_clip.py and
// tokenization_bert.py's BasicTokenizer step for step; the comments name the Python they follow.
#include "tokenizer/clip.h"

#include <utf8proc.h>

#include <limits>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pcre_regex.h"

namespace kvad::tok {
namespace {

constexpr const char* kBos = "<|startoftext|>";
constexpr const char* kEos = "<|endoftext|>";
// transformers reads merges.txt as `read().strip().split("\n")[1 : 49152 - 256 - 2 + 1]`.
constexpr size_t kMaxMerges = 49152 - 256 - 2;
// CLIP's pattern (re.IGNORECASE); the special tokens are cut out before it runs.
constexpr const char* kPattern = R"((?i)'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)";

// BasicTokenizer._is_chinese_char: the CJK Unified Ideographs blocks (not Hiragana, Katakana, Hangul).
bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_control_category(utf8proc_category_t cat) {
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CN ||
         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
}

std::vector<uint32_t> codepoints(std::string_view s) {
  std::vector<uint32_t> out;
  size_t i = 0;
  while (i < s.size()) out.push_back(next_codepoint(s, i));
  return out;
}

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t*)s.data(), (utf8proc_ssize_t)s.size(), &out,
                                    (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("CLIP tokenizer: NFC failed: {}", utf8proc_errmsg(n));
  std::string r((const char*)out, (size_t)n);
  free(out);
  return r;
}

// The pad/bos/... entry of tokenizer_config.json or special_tokens_map.json: a string or an
// AddedToken object {"content": ...}; "" when absent or null.
std::string token_entry(const Json& j, const char* key, const std::string& file) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return "";
  const Json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  fail("{}: '{}' must be a string or an object with a string 'content', not {}", file, key, json_snippet(v));
}

}  // namespace

std::string clip_basic_clean(std::string_view raw) {
  std::string text = sanitize_utf8(raw);  // ill-formed bytes become U+FFFD, which is then dropped
  // _clean_text + _tokenize_chinese_chars
  std::string cleaned;
  for (uint32_t c : codepoints(text)) {
    if (c == 0 || c == 0xFFFD) continue;
    bool ws = c == ' ' || c == '\t' || c == '\n' || c == '\r';
    auto cat = utf8proc_category((utf8proc_int32_t)c);
    if (!ws && is_control_category(cat)) continue;
    if (ws || cat == UTF8PROC_CATEGORY_ZS) {
      cleaned += ' ';
    } else if (is_cjk(c)) {
      cleaned += ' ';
      append_utf8(cleaned, c);
      cleaned += ' ';
    } else {
      append_utf8(cleaned, c);
    }
  }
  // NFC, whitespace_tokenize (str.split(): after the cleanup only " ", U+2028, U+2029 are left
  // of Python's white space), lower(), and " ".join.
  std::string out;
  bool in_word = false;
  for (uint32_t c : codepoints(nfc(cleaned))) {
    if (c == ' ' || c == 0x2028 || c == 0x2029) {
      in_word = false;
      continue;
    }
    if (!in_word && !out.empty()) out += ' ';
    in_word = true;
    if (c == 0x130) {  // str.lower() is the full mapping: İ -> i + combining dot above
      out += 'i';
      append_utf8(out, 0x307);
    } else {
      append_utf8(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c));
    }
  }
  return out;
}

ClipTokenizer::ClipTokenizer() = default;
ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

void ClipTokenizer::read_vocab(std::string_view text, const std::string& what) {
  Json j = parse_json(text, what);
  if (!j.is_object()) fail("{}: must be an object of token -> id, not {}", what, json_type_name(j));
  if (j.empty()) fail("{}: is empty", what);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail("{}: '{}': the id must be an integer in [0, 2^31), not {}", what, it.key(), json_snippet(*it));
    vocab_.emplace(it.key(), (int32_t)it->get<int64_t>());
  }
}

void ClipTokenizer::read_merges(std::string_view text, const std::string& what) {
  // Python's str.strip() then split("\n"); the first line ("#version: 0.2") is skipped whatever it says.
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  size_t line_no = 0, pos = 0;
  while (pos <= text.size() && ranks_.size() < kMaxMerges) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line_no++ == 0) continue;
    while (!line.empty() && is_space(line.back())) line.remove_suffix(1);
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || line.find(' ', sp + 1) != std::string_view::npos)
      fail("{}: line {}: a merge must be two symbols separated by one space, not '{}'", what, line_no,
           sanitize_utf8(line.substr(0, 60)));
    if (!is_valid_utf8(line)) fail("{}: line {}: not valid UTF-8", what, line_no);
    ranks_[std::string(line)] = (uint32_t)(ranks_.size());  // a repeated pair keeps its last rank, as dict() does
  }
  if (ranks_.empty()) fail("{}: no merges after the first line", what);
}

int32_t ClipTokenizer::id_of(const std::string& piece, const std::string& what, const std::string& field) const {
  auto it = vocab_.find(piece);
  if (it == vocab_.end()) fail("{}: {} '{}' is not in the vocabulary", what, field, piece);
  return it->second;
}

ClipTokenizer ClipTokenizer::from_texts(std::string_view vocab_json, std::string_view merges_txt,
                                        const std::string& vocab_what, const std::string& merges_what) {
  ClipTokenizer t;
  t.read_vocab(vocab_json, vocab_what);
  t.read_merges(merges_txt, merges_what);
  t.bos_ = t.id_of(kBos, vocab_what, "the bos token");
  t.eos_ = t.id_of(kEos, vocab_what, "the eos token");
  t.unk_ = t.eos_;
  t.pad_ = t.eos_;
  static const std::string where = "CLIP's pre-tokenizer pattern";
  t.pattern_ = std::make_unique<Regex>(kPattern, Field{where, ""});
  return t;
}

ClipTokenizer ClipTokenizer::from_folder(const std::string& dir) {
  std::string vocab_path = join_path(dir, "vocab.json"), merges_path = join_path(dir, "merges.txt");
  for (const std::string& p : {vocab_path, merges_path})
    if (!file_exists(p)) fail("{}: missing (a CLIP tokenizer folder holds vocab.json and merges.txt)", p);
  ClipTokenizer t = from_texts(read_file(vocab_path), read_file(merges_path), vocab_path, merges_path);
  // pad / unk / model_max_length: tokenizer_config.json first, then special_tokens_map.json.
  std::string pad, unk;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    std::string path = join_path(dir, name);
    if (!file_exists(path)) continue;
    Json j = read_json_file(path);
    if (!j.is_object()) fail("{}: must be an object", path);
    if (pad.empty() && !(pad = token_entry(j, "pad_token", path)).empty()) t.pad_ = t.id_of(pad, path, "pad_token");
    if (unk.empty() && !(unk = token_entry(j, "unk_token", path)).empty()) t.unk_ = t.id_of(unk, path, "unk_token");
    if (std::string(name) == "tokenizer_config.json" && j.contains("model_max_length")) {
      const Json& m = j["model_max_length"];
      if (!m.is_number_integer() || m.get<int64_t>() < 2 || m.get<int64_t>() > 4096)
        fail("{}: 'model_max_length' must be an integer in [2, 4096], not {}", path, json_snippet(m));
      t.max_length_ = m.get<int64_t>();
    }
  }
  return t;
}

std::vector<std::string> ClipTokenizer::bpe_word(std::string_view bytes) const {
  // CLIPTokenizer.bpe: word = tuple(token[:-1]) + (token[-1] + "</w>",), then the lowest-ranked
  // adjacent pair is merged everywhere (left to right) until no pair is a merge.
  const ByteLevelAlphabet& alpha = byte_level_alphabet();
  std::vector<std::string> word;
  for (unsigned char b : bytes) {
    word.emplace_back();
    append_utf8(word.back(), alpha.byte_to_cp[b]);
  }
  if (word.empty()) return word;
  word.back() += "</w>";
  std::string key;
  while (word.size() > 1) {
    uint32_t best = std::numeric_limits<uint32_t>::max();
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < word.size(); i++) {
      key.assign(word[i]).append(" ").append(word[i + 1]);
      auto it = ranks_.find(key);
      if (it != ranks_.end() && it->second < best) best = it->second, best_i = i;
    }
    if (best == std::numeric_limits<uint32_t>::max()) break;
    std::string first = word[best_i], second = word[best_i + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(word[i]));
        i++;
      }
    }
    word = std::move(merged);
  }
  return word;
}

template <typename Emit>
void ClipTokenizer::bpe_text(std::string_view raw, Emit&& emit) const {
  std::string text = clip_basic_clean(raw);
  size_t from = 0, start = 0, end = 0;
  while (from < text.size() && pattern_->find(text, from, &start, &end)) {
    for (std::string& piece : bpe_word(std::string_view(text).substr(start, end - start))) emit(std::move(piece));
    from = end;
  }
}

std::vector<std::string> ClipTokenizer::pieces(std::string_view text) const {
  std::vector<std::string> out;
  // The special tokens written in the text (the slow tokenizer's added-token split) come first.
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t b = text.find(kBos, pos), e = text.find(kEos, pos);
    size_t cut = std::min(b, e);
    bpe_text(text.substr(pos, cut == std::string_view::npos ? std::string_view::npos : cut - pos),
             [&](std::string p) { out.push_back(std::move(p)); });
    if (cut == std::string_view::npos) break;
    out.push_back(cut == b ? kBos : kEos);
    pos = cut + (cut == b ? std::char_traits<char>::length(kBos) : std::char_traits<char>::length(kEos));
  }
  return out;
}

std::vector<int32_t> ClipTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (const std::string& p : pieces(text)) {
    auto it = vocab_.find(p);
    ids.push_back(it == vocab_.end() ? unk_ : it->second);
  }
  return ids;
}

std::vector<int32_t> ClipTokenizer::encode_padded(std::string_view text) const {
  std::vector<int32_t> body = encode(text);
  std::vector<int32_t> ids{bos_};
  size_t keep = std::min(body.size(), (size_t)max_length_ - 2);
  ids.insert(ids.end(), body.begin(), body.begin() + (ptrdiff_t)keep);
  ids.push_back(eos_);
  ids.resize((size_t)max_length_, pad_);
  return ids;
}

}  // namespace kvad::tok
