#include "train/token_data.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/text.h"
#include "core/utf8.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"

namespace kvad::train {

namespace {

constexpr size_t kMaxLineBytes = size_t(1) << 20;  // 1 MB: a conversation, not a corpus, per line
constexpr int64_t kMaxLines = 1000000;

// At most `max` characters of a text for an error message ("..." included when cut), control
// characters as spaces.
std::string excerpt(std::string_view text, size_t max) {
  std::string s = text.size() <= max ? std::string(text) : std::string(text.substr(0, max - 3));
  s = sanitize_utf8(s.substr(0, utf8_complete_prefix(s)));
  for (char& c : s)
    if ((unsigned char)c < 0x20) c = ' ';
  return text.size() <= max ? s : s + "...";
}
// The start of a bad line, as errors quote it.
std::string line_start(std::string_view line) { return excerpt(line, 60); }

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

bool ends_with_jsonl(const std::string& path) {
  return ends_with_ignoring_case(path, ".jsonl");
}

// A file's lines, read in pieces (a line longer than 1 MB or a file of more than a million lines
// is refused before more is read), hashing every byte.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb"), &std::fclose) {
    if (!f_) fail("--data {}: cannot open it", path);
  }
  // The next line without its "\n" and "\r"; false at the end of the file.
  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == len_) {
        len_ = std::fread(buf_, 1, sizeof buf_, f_.get()), pos_ = 0;
        if (std::ferror(f_.get())) fail("--data {}: read error after {} bytes", path_, bytes);
        hash = fnv1a(std::string_view(buf_, len_), hash);
        bytes += (int64_t)len_;
        if (len_ == 0) return !line.empty() && finish(line);  // a last line without "\n"
      }
      const char* nl = static_cast<const char*>(std::memchr(buf_ + pos_, '\n', len_ - pos_));
      size_t end = nl ? (size_t)(nl - buf_) : len_;
      line.append(buf_ + pos_, end - pos_);
      pos_ = nl ? end + 1 : end;
      if (line.size() > kMaxLineBytes)
        fail("--data {}:{}: the line is longer than 1 MB (one conversation a line; is this JSONL?): {}", path_,
             line_no + 1, line_start(line));
      if (nl) return finish(line);
    }
  }

  int64_t line_no = 0;  // of the line last returned (1-based)
  uint64_t hash = kFnv1aBasis;
  int64_t bytes = 0;

 private:
  bool finish(std::string& line) {
    if (++line_no > kMaxLines)
      fail("--data {}: more than {} lines; split the file (kvad reads at most a million conversations)", path_,
           kMaxLines);
    if (line_no == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // a UTF-8 byte order mark
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }

  std::string path_;
  std::unique_ptr<FILE, int (*)(FILE*)> f_;
  char buf_[1 << 16];
  size_t pos_ = 0, len_ = 0;
};

// A file not named *.jsonl is chat JSONL when its first non-blank line is an object with "messages".
bool first_line_is_chat(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return false;
  std::string head(kMaxLineBytes + 1, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), f.get()));
  size_t at = 0;
  while (at < head.size()) {
    size_t nl = head.find('\n', at);
    if (nl == std::string::npos && head.size() > kMaxLineBytes) return false;  // a long first line: text
    std::string_view line(head.data() + at, (nl == std::string::npos ? head.size() : nl) - at);
    if (!is_blank(line)) {
      if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);
      try {
        Json j = parse_json(line, path);
        return j.is_object() && j.contains("messages");
      } catch (const Error&) {
        return false;
      }
    }
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return false;
}

// ---- chat JSONL

struct Sequence {
  std::vector<int32_t> ids;
  std::vector<uint8_t> scored;
  bool truncated = false;
};

class ChatLoader {
 public:
  ChatLoader(const std::string& path, const Tokenizer& tok, int64_t context) : path_(path), tok_(tok), T_(context) {
    if (tok.chat_template().empty())
      fail(
          "--data {}: chat JSONL needs a base model with a chat template, and this base has none; give plain text "
          "instead, or a base with a chat template",
          path);
    try {
      tmpl_ = std::make_unique<ChatTemplate>(tok.chat_template(), "the base model's chat_template");
    } catch (const Error& e) {
      fail("--data {}: chat JSONL needs the base's chat template, which kvad cannot read: {}", path, e.what());
    }
  }

  // The sequences of one line's conversation (none when it has no assistant token within the
  // context); sets resplit when the template made it more than one.
  std::vector<Sequence> conversation(const std::string& line, int64_t line_no, bool& resplit) {
    line_ = &line, line_no_ = line_no;
    OrderedJson j;
    try {
      j = parse_ordered_json(line, "", JsonLimits{.max_depth = 64, .max_bytes = kMaxLineBytes});
    } catch (const Error& e) {
      // ": invalid JSON: [json.exception.parse_error.101] parse error at line 1, column 15: syntax error
      // while parsing value - invalid literal; last read: '...'": the column and the reason (the
      // error quotes the line's start itself).
      std::string why = e.what();
      if (size_t at = why.find("invalid JSON: "); at != std::string::npos) why.erase(0, at + 14);
      if (size_t at = why.find("] "); why.starts_with("[json.exception") && at != std::string::npos)
        why.erase(0, at + 2);
      if (why.starts_with("parse error at line 1, ")) why.erase(0, 23);
      if (size_t at = why.find("; last read"); at != std::string::npos) why.erase(at);
      bad(fmt::format("not JSON ({})", excerpt(why, 120)));
    }
    if (!j.is_object()) bad(fmt::format("expected an object with a \"messages\" array, got {}", json_type_name(j)));
    auto it = j.find("messages");
    if (it == j.end()) bad("no \"messages\" array");
    if (!it->is_array()) bad(fmt::format("\"messages\" is {}, not an array", json_type_name(*it)));
    if (it->empty()) bad("\"messages\" is empty");
    const OrderedJson& msgs = *it;
    for (size_t k = 0; k < msgs.size(); k++) {
      const OrderedJson& m = msgs[k];
      if (!m.is_object()) bad(fmt::format("message {} is {}, not an object", k + 1, json_type_name(m)));
      for (const char* key : {"role", "content"}) {
        auto f = m.find(key);
        if (f == m.end()) bad(fmt::format("message {} has no \"{}\"", k + 1, key));
        if (!f->is_string())
          bad(fmt::format("message {}'s \"{}\" is {}, not a string", k + 1, key, json_type_name(*f)));
      }
    }

    std::vector<Sequence> out;
    Sequence cur;
    OrderedJson history = OrderedJson::array();
    for (size_t i = 0; i < msgs.size(); i++) {
      // An opening assistant message is context: the engine never writes a chat's first message
      // (and templates need a message to render a generation prompt after).
      if (i == 0 || msgs[i]["role"].get<std::string>() != "assistant") {
        history.push_back(msgs[i]);
        continue;
      }
      // The turn's targets: what rendering it adds after the generation prompt of its history.
      std::vector<int32_t> prompt = encode(history, true, i);
      if ((int64_t)prompt.size() > T_) break;  // this turn (and every later one) starts past the window
      history.push_back(msgs[i]);
      std::vector<int32_t> full = encode(history, false, i);
      if (full.size() < prompt.size() || !std::equal(prompt.begin(), prompt.end(), full.begin()))
        bad(
            fmt::format("the chat template does not render message {} (assistant) as a continuation of its "
                        "generation prompt, so its tokens cannot be told apart; kvad cannot train on this template",
                        i + 1));
      // Earlier turns stay in the same sequence when this turn's prompt starts with it; a template
      // that renders history differently (Qwen3) gets a sequence per turn, as the engine sees it.
      if (!cur.ids.empty() &&
          (cur.ids.size() > prompt.size() || !std::equal(cur.ids.begin(), cur.ids.end(), prompt.begin()))) {
        out.push_back(std::move(cur));
        cur = Sequence{};
        resplit = true;
      }
      cur.scored.resize(prompt.size(), 0);
      cur.scored.resize(full.size(), 1);
      cur.ids = std::move(full);
      if ((int64_t)cur.ids.size() > T_ + 1) {
        cur.ids.resize((size_t)T_ + 1), cur.scored.resize((size_t)T_ + 1);
        cur.truncated = true;
      }
    }
    if (!cur.ids.empty()) out.push_back(std::move(cur));
    // A sequence is kept when it has a target (positions 1.., the first token has no input).
    out.erase(std::remove_if(out.begin(), out.end(),
                             [](const Sequence& s) {
                               return std::find(s.scored.begin() + 1, s.scored.end(), 1) == s.scored.end();
                             }),
              out.end());
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& why) const {
    fail("--data {}:{}: {}: {}", path_, line_no_, why, line_start(*line_));
  }

  // The tokens of a rendered chat as the engine encodes its prompts (special tokens parsed, none
  // added), at most context + 2 of them.
  std::vector<int32_t> encode(const OrderedJson& messages, bool generation_prompt, size_t msg) const {
    std::string text;
    try {
      text = tmpl_->render(messages, generation_prompt, tok_.bos_token(), tok_.eos_token());
    } catch (const Error& e) {
      bad(fmt::format("the chat template fails on message {}: {}", msg + 1, e.what()));
    }
    return tok_.encode(text, /*parse_special=*/true, /*add_special=*/false, (size_t)T_ + 1);
  }

  const std::string& path_;
  const Tokenizer& tok_;
  const int64_t T_;
  std::unique_ptr<ChatTemplate> tmpl_;
  const std::string* line_ = nullptr;
  int64_t line_no_ = 0;
};

TokenData load_chat(const std::string& path, const Tokenizer& tok, int64_t context) {
  TokenData d;
  d.path = path, d.chat = true, d.pad = tok.eos_id().value_or(0);
  d.starts.push_back(0);
  ChatLoader loader(path, tok, context);
  LineReader reader(path);
  std::vector<int64_t> first_seq;  // of each usable conversation
  int64_t lines = 0;
  std::string line;
  while (reader.next(line)) {
    if (is_blank(line)) continue;
    lines++;
    if (line.find('\0') != std::string::npos)
      fail("--data {}:{}: a NUL byte; kvad trains on UTF-8 text: {}", path, reader.line_no, line_start(line));
    if (!is_valid_utf8(line))
      fail("--data {}:{}: not UTF-8 text (convert it first, e.g. iconv -f latin1 -t utf-8): {}", path, reader.line_no,
           line_start(line));
    bool resplit = false;
    std::vector<Sequence> seqs = loader.conversation(line, reader.line_no, resplit);
    if (seqs.empty()) {
      d.skipped++;
      continue;
    }
    d.resplit += resplit;
    first_seq.push_back(d.sequences());
    for (const Sequence& s : seqs) {
      d.ids.insert(d.ids.end(), s.ids.begin(), s.ids.end());
      d.scored.insert(d.scored.end(), s.scored.begin(), s.scored.end());
      d.starts.push_back((int64_t)d.ids.size());
      d.truncated += s.truncated;
    }
  }
  d.hash = reader.hash, d.bytes = reader.bytes;
  if (d.bytes == 0) fail("--data {}: the file is empty", path);
  if (lines == 0) fail("--data {}: no conversations (only blank lines)", path);
  d.conversations = (int64_t)first_seq.size();
  if (d.conversations == 0)
    fail(
        "--data {}: no usable conversation: none of the {} has an assistant message within the first {} tokens "
        "(the role must be \"assistant\")",
        path, lines, context + 1);
  if (d.conversations < 2)
    fail(
        "--data {}: only one usable conversation ({} skipped with no assistant token); at least 2 are needed, one "
        "for training and one for validation",
        path, d.skipped);
  d.val_conversations = std::max<int64_t>(1, d.conversations / 10);
  d.n_train = first_seq[(size_t)(d.conversations - d.val_conversations)];
  const int64_t split = d.starts[(size_t)d.n_train];
  d.train_tokens = split, d.val_tokens = (int64_t)d.ids.size() - split;
  for (int64_t s = 0; s < d.sequences(); s++) {
    int64_t targets =
        std::count(d.scored.begin() + d.starts[(size_t)s] + 1, d.scored.begin() + d.starts[(size_t)s + 1], 1);
    (s < d.n_train ? d.train_targets : d.val_targets) += targets;
  }
  return d;
}

// Rows of sequences padded to the longest: x = pad and y = -1 past a sequence's end, y = -1 on
// tokens that are not targets. Returns T.
int64_t fill_sequences(const TokenData& d, const std::vector<int64_t>& seqs, int32_t* x, int32_t* y) {
  int64_t T = 1;
  for (int64_t s : seqs) T = std::max(T, d.starts[(size_t)s + 1] - d.starts[(size_t)s] - 1);
  for (size_t r = 0; r < seqs.size(); r++) {
    const int64_t at = d.starts[(size_t)seqs[r]], n = d.starts[(size_t)seqs[r] + 1] - at - 1;
    int32_t* xr = x + (int64_t)r * T;
    int32_t* yr = y + (int64_t)r * T;
    for (int64_t t = 0; t < T; t++) {
      xr[t] = t < n ? d.ids[(size_t)(at + t)] : d.pad;
      yr[t] = t < n && d.scored[(size_t)(at + t + 1)] ? d.ids[(size_t)(at + t + 1)] : -1;
    }
  }
  return T;
}

int64_t val_windows(const TokenData& d, int64_t context) { return ((int64_t)d.ids.size() - d.n_train - 1) / context; }

}  // namespace

TokenData load_token_data(const std::string& path, const Tokenizer& tok, int64_t context) {
  if (!file_exists(path)) fail("--data {}: no such file", path);
  if (is_directory(path)) fail("--data {}: is a folder; give a text or chat JSONL file", path);
  if (ends_with_jsonl(path) || first_line_is_chat(path)) return load_chat(path, tok, context);

  std::string text = read_training_text(path);
  TokenData d;
  d.path = path, d.hash = fnv1a(text), d.bytes = (int64_t)text.size(), d.pad = tok.eos_id().value_or(0);
  d.ids = tok.encode(text, /*parse_special=*/false, /*add_special=*/false);
  const int64_t n = (int64_t)d.ids.size();
  d.n_train = (int64_t)(0.9 * (double)n);
  check_split_fits(path, n, d.n_train, context, "tokens");
  d.train_tokens = d.n_train, d.val_tokens = n - d.n_train;
  d.train_targets = d.n_train - 1, d.val_targets = val_windows(d, context) * context;
  return d;
}

int64_t token_batch(const TokenData& d, uint64_t seed, int64_t step, int64_t B, int64_t context, int32_t* x,
                    int32_t* y) {
  if (!d.chat) {
    sample_windows(d.ids.data(), d.n_train, seed, step, B, context, x, y);
    return context;
  }
  Rng rng = batch_rng(seed, step);
  std::vector<int64_t> seqs((size_t)B);
  for (int64_t& s : seqs) s = (int64_t)rng.below((uint64_t)d.n_train);
  return fill_sequences(d, seqs, x, y);
}

int64_t token_val_batches(const TokenData& d, int64_t B, int64_t context) {
  int64_t n = d.chat ? d.sequences() - d.n_train : val_windows(d, context);
  return (n + B - 1) / B;
}

int64_t token_val_batch(const TokenData& d, int64_t i, int64_t B, int64_t context, int32_t* x, int32_t* y,
                        int64_t* rows) {
  const int64_t first = i * B;
  if (d.chat) {
    std::vector<int64_t> seqs;
    for (int64_t s = d.n_train + first; s < d.sequences() && (int64_t)seqs.size() < B; s++) seqs.push_back(s);
    *rows = (int64_t)seqs.size();
    return fill_sequences(d, seqs, x, y);
  }
  *rows = std::clamp<int64_t>(val_windows(d, context) - first, 0, B);
  for (int64_t r = 0; r < *rows; r++) {
    const int32_t* at = d.ids.data() + d.n_train + (first + r) * context;
    std::copy(at, at + context, x + r * context);
    std::copy(at + 1, at + context + 1, y + r * context);
  }
  return context;
}

int64_t target_bytes(const Tokenizer& tok, const int32_t* y, int64_t n) {
  int64_t bytes = 0;
  for (int64_t i = 0; i < n; i++)
    if (y[i] >= 0) bytes += (int64_t)tok.token_bytes(y[i]).size();
  return bytes;
}

std::string describe(const TokenData& d, int64_t context) {
  if (!d.chat)
    return fmt::format("{}: plain text, {} tokens ({:.2f} bytes a token): {} train / {} validation", d.path,
                       d.train_tokens + d.val_tokens, (double)d.bytes / (double)std::max<size_t>(1, d.ids.size()),
                       d.train_tokens, d.val_tokens);
  std::string s = fmt::format(
      "{}: chat, {} conversations ({} validation) in {} sequences; {} train tokens ({} assistant targets), {} "
      "validation ({} targets)",
      d.path, d.conversations, d.val_conversations, d.sequences(), d.train_tokens, d.train_targets, d.val_tokens,
      d.val_targets);
  if (d.truncated) s += fmt::format("; {} cut to {} tokens", d.truncated, context + 1);
  if (d.skipped) s += fmt::format("; {} skipped (no assistant token within the context)", d.skipped);
  if (d.resplit) s += fmt::format("; {} split turn by turn (the template re-renders earlier turns)", d.resplit);
  return s;
}

}  // namespace kvad::train
