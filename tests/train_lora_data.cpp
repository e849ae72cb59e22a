// The data side of `kvad train --lora` (src/train/token_data.h) with a real tokenizer and chat
// template (Qwen3's): which tokens a chat scores (the assistant turns and their end-of-turn
// tokens, nothing of the system or user turns, no padding), batches x/y shifted by one and
// reproducible from (seed, step), the 90/10 splits, truncation and skipped conversations, and
// every kind of bad input naming the file and the line.
#include "train/token_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"
#include "fixture_tokenizer.h"
#include "test_support.h"
#include "tokenizer/chat_template.h"
#include "train/data.h"

using namespace kvad;
using namespace kvad::train;

namespace {

const Tokenizer& qwen3() {
  static const Tokenizer tok = test::load_fixture_tokenizer("qwen3");
  return tok;
}

// A byte-level tokenizer (every byte its own token, data.h's char_tokenizer_json) with the given
// chat template ("" for none): quick to build, for the tests of template shapes; the tests of what
// a real tokenizer makes of a template (special tokens, merges) use Qwen3's.
Tokenizer byte_tokenizer(const std::string& tmpl) {
  std::vector<uint8_t> all(256);
  for (int b = 0; b < 256; b++) all[(size_t)b] = (uint8_t)b;
  Json tc = Json::object();
  if (!tmpl.empty()) tc["chat_template"] = tmpl;
  return Tokenizer::from_json(char_tokenizer_json(all), tc, "bytes/tokenizer.json");
}

std::string template_file(const std::string& name) {
  return read_file(test::source_path("tests/fixtures/chat_templates/" + name + ".jinja"));
}

std::string dir() {
  static const std::string d = test::temp_dir("train_lora_data");
  return d;
}

std::string write(const std::string& name, const std::string& text) {
  std::string p = join_path(dir(), name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string message(const char* role, const std::string& content) {
  return Json({{"role", role}, {"content", content}}).dump();
}
std::string conversation(std::initializer_list<std::string> messages) {
  std::string s = "{\"messages\": [";
  for (const std::string& m : messages) s += (s.back() == '[' ? "" : ", ") + m;
  return s + "]}\n";
}
std::string qa(const std::string& q, const std::string& a) {
  return conversation({message("user", q), message("assistant", a)});
}

// The text of the scored targets of rows [rows x T], row by row (each row's targets joined).
std::vector<std::string> scored_text(const Tokenizer& tok, const std::vector<int32_t>& y, int64_t rows, int64_t T) {
  std::vector<std::string> out;
  for (int64_t r = 0; r < rows; r++) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < T; t++)
      if (y[(size_t)(r * T + t)] >= 0) ids.push_back(y[(size_t)(r * T + t)]);
    out.push_back(tok.decode(ids));
  }
  return out;
}

// The whole text of sequence s (chat): what the template rendered, cut to the context.
std::string sequence_text(const Tokenizer& tok, const TokenData& d, int64_t s) {
  return tok.decode(std::vector<int32_t>(d.ids.begin() + d.starts[(size_t)s], d.ids.begin() + d.starts[(size_t)s + 1]));
}

struct Batch {
  std::vector<int32_t> x, y;
  int64_t T = 0, rows = 0;
};
Batch val_batch(const TokenData& d, int64_t i, int64_t B, int64_t context) {
  Batch b;
  b.x.resize((size_t)(B * context)), b.y.resize((size_t)(B * context));
  b.T = token_val_batch(d, i, B, context, b.x.data(), b.y.data(), &b.rows);
  b.x.resize((size_t)(b.rows * b.T)), b.y.resize((size_t)(b.rows * b.T));
  return b;
}
Batch train_batch(const TokenData& d, uint64_t seed, int64_t step, int64_t B, int64_t context) {
  Batch b;
  b.x.resize((size_t)(B * context)), b.y.resize((size_t)(B * context));
  b.T = token_batch(d, seed, step, B, context, b.x.data(), b.y.data());
  b.rows = B;
  b.x.resize((size_t)(B * b.T)), b.y.resize((size_t)(B * b.T));
  return b;
}

}  // namespace

TEST(LoraData, ChatScoresExactlyTheAssistantTurn) {
  const Tokenizer& tok = qwen3();
  std::string line =
      conversation({message("system", "You are terse."), message("user", "Hello"), message("assistant", "Hi there!")});
  std::string path = write("one_turn.jsonl", line + line);
  TokenData d = load_token_data(path, tok, 64);
  ASSERT_TRUE(d.chat);
  EXPECT_EQ(d.conversations, 2);
  EXPECT_EQ(d.val_conversations, 1);
  EXPECT_EQ(d.sequences(), 2);
  EXPECT_EQ(d.n_train, 1);
  EXPECT_EQ(d.bytes, (int64_t)(2 * line.size()));
  EXPECT_EQ(d.hash, fnv1a(line + line));

  // The validation conversation, one row: x is the rendered chat, y the same shifted by one,
  // with -1 everywhere but the assistant's reply and its end-of-turn tokens.
  Batch b = val_batch(d, 0, 4, 64);
  ASSERT_EQ(b.rows, 1);
  const std::string rendered =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
      "<think>\n\n</think>\n\nHi there!<|im_end|>\n";
  std::vector<int32_t> all = tok.encode(rendered, true, false);
  ASSERT_EQ(b.T, (int64_t)all.size() - 1);
  EXPECT_EQ(b.x, std::vector<int32_t>(all.begin(), all.end() - 1));
  // Qwen3 renders the last assistant turn with an empty think block: the model learns to write
  // it, as the engine's generation prompt ("<|im_start|>assistant\n") leaves it to the model.
  const std::string reply = "<think>\n\n</think>\n\nHi there!<|im_end|>\n";
  EXPECT_EQ(scored_text(tok, b.y, 1, b.T)[0], reply);
  const int64_t prompt = (int64_t)tok.encode(rendered.substr(0, rendered.size() - reply.size()), true, false).size();
  for (int64_t t = 0; t < b.T; t++) {
    if (t + 1 < prompt)
      EXPECT_EQ(b.y[(size_t)t], -1) << "system/user position " << t;
    else
      EXPECT_EQ(b.y[(size_t)t], all[(size_t)t + 1]) << "assistant position " << t;
  }
  EXPECT_EQ(d.train_targets, b.T + 1 - prompt);
  EXPECT_EQ(d.val_targets, b.T + 1 - prompt);
  // The bytes behind the targets: the reply's text, "<|im_end|>" counted as its 10 characters.
  EXPECT_EQ(target_bytes(tok, b.y.data(), b.T), (int64_t)reply.size());
}

TEST(LoraData, PaddingAndShiftInTrainingBatches) {
  const Tokenizer& tok = qwen3();
  std::string text;
  for (int i = 0; i < 20; i++)
    text += qa("Question " + std::to_string(i),
               i % 2 ? "Short." : "A much longer answer that goes on for a while, " + std::to_string(i));
  TokenData d = load_token_data(write("pad.jsonl", text), tok, 128);
  ASSERT_EQ(d.conversations, 20);
  ASSERT_EQ(d.val_conversations, 2);
  ASSERT_EQ(d.n_train, 18);
  Batch b = train_batch(d, 7, 3, 8, 128);
  const int32_t eos = *tok.eos_id();
  EXPECT_EQ(d.pad, eos);
  int64_t padded_rows = 0;
  for (int64_t r = 0; r < b.rows; r++) {
    const int32_t* x = &b.x[(size_t)(r * b.T)];
    const int32_t* y = &b.y[(size_t)(r * b.T)];
    // The row is one of the training sequences, then padding.
    int64_t s = 0, n = 0;
    for (; s < d.n_train; s++) {
      n = d.starts[(size_t)s + 1] - d.starts[(size_t)s] - 1;
      if (n <= b.T && std::equal(x, x + n, d.ids.begin() + d.starts[(size_t)s])) break;
    }
    ASSERT_LT(s, d.n_train) << "row " << r << " is no training sequence";
    for (int64_t t = 0; t < b.T; t++) {
      if (t >= n) {
        EXPECT_EQ(x[t], eos);
        EXPECT_EQ(y[t], -1);
      } else if (y[t] >= 0) {
        EXPECT_EQ(y[t], d.ids[(size_t)(d.starts[(size_t)s] + t + 1)]);  // x shifted by one
        if (t + 1 < n) {
          EXPECT_EQ(y[t], x[t + 1]);
        }
      }
    }
    padded_rows += n < b.T;
    std::string reply = scored_text(tok, std::vector<int32_t>(y, y + b.T), 1, b.T)[0];
    EXPECT_TRUE(reply == "<think>\n\n</think>\n\nShort.<|im_end|>\n" ||
                reply.rfind("<think>\n\n</think>\n\nA much longer answer", 0) == 0)
        << reply;
  }
  EXPECT_GT(padded_rows, 0);  // short and long answers in one batch of 8 (seed 7, step 3)
}

TEST(LoraData, SameSeedAndStepSameBatch) {
  const Tokenizer& tok = qwen3();
  std::string chat, plain;
  for (int i = 0; i < 40; i++) chat += qa("Q" + std::to_string(i), "Answer number " + std::to_string(i));
  for (int i = 0; i < 400; i++) plain += "Line " + std::to_string(i) + " of a plain text file.\n";
  for (const std::string& path : {write("seeds.jsonl", chat), write("seeds.txt", plain)}) {
    TokenData d = load_token_data(path, tok, 32);
    SCOPED_TRACE(path);
    Batch a = train_batch(d, 1337, 5, 4, 32), again = train_batch(d, 1337, 5, 4, 32);
    Batch next = train_batch(d, 1337, 6, 4, 32), other = train_batch(d, 1338, 5, 4, 32);
    EXPECT_EQ(a.x, again.x);
    EXPECT_EQ(a.y, again.y);
    EXPECT_NE(a.x, next.x);
    EXPECT_NE(a.x, other.x);
  }
}

TEST(LoraData, ChatSplitIsTheLastTenthOfConversations) {
  const Tokenizer& tok = qwen3();
  std::string text;
  for (int i = 0; i < 30; i++) text += qa("Q" + std::to_string(i), "A" + std::to_string(i));
  TokenData d = load_token_data(write("split30.jsonl", text), tok, 64);
  EXPECT_EQ(d.conversations, 30);
  EXPECT_EQ(d.val_conversations, 3);
  EXPECT_EQ(d.n_train, 27);
  EXPECT_EQ(token_val_batches(d, 2, 64), 2);
  Batch b0 = val_batch(d, 0, 2, 64), b1 = val_batch(d, 1, 2, 64);
  EXPECT_EQ(b0.rows, 2);
  EXPECT_EQ(b1.rows, 1);
  auto replies = scored_text(tok, b0.y, b0.rows, b0.T);
  EXPECT_EQ(replies[0], "<think>\n\n</think>\n\nA27<|im_end|>\n");  // in file order
  EXPECT_EQ(replies[1], "<think>\n\n</think>\n\nA28<|im_end|>\n");
  EXPECT_EQ(scored_text(tok, b1.y, 1, b1.T)[0], "<think>\n\n</think>\n\nA29<|im_end|>\n");
  // Training never draws a validation conversation.
  for (int64_t step = 1; step <= 20; step++) {
    Batch b = train_batch(d, 3, step, 4, 64);
    for (const std::string& r : scored_text(tok, b.y, b.rows, b.T))
      for (const char* v : {"A27<", "A28<", "A29<"}) EXPECT_EQ(r.find(v), std::string::npos) << r;
  }
  // Few conversations: one for validation, the rest for training.
  std::string five;
  for (int i = 0; i < 5; i++) five += qa("Q", "A" + std::to_string(i));
  TokenData f = load_token_data(write("split5.jsonl", five), tok, 64);
  EXPECT_EQ(f.val_conversations, 1);
  EXPECT_EQ(f.n_train, 4);
  TokenData two = load_token_data(write("split2.jsonl", qa("Q", "A") + qa("Q", "B")), tok, 64);
  EXPECT_EQ(two.val_conversations, 1);
  EXPECT_EQ(two.n_train, 1);
}

TEST(LoraData, PlainTextSplitsNinetyTenByTokensAndCountsItsBytes) {
  const Tokenizer& tok = qwen3();
  std::string text;
  for (int i = 0; i < 300; i++) text += "The quick brown fox " + std::to_string(i * 7919 % 1000) + " jumps.\n";
  std::string path = write("plain.txt", text);
  const int64_t ctx = 32;
  TokenData d = load_token_data(path, tok, ctx);
  ASSERT_FALSE(d.chat);
  std::vector<int32_t> ids = tok.encode(text, false, false);
  EXPECT_EQ(d.ids, ids);
  const int64_t n = (int64_t)ids.size();
  EXPECT_EQ(d.n_train, (int64_t)(0.9 * (double)n));
  EXPECT_EQ(d.train_tokens + d.val_tokens, n);
  EXPECT_EQ(d.bytes, (int64_t)text.size());
  EXPECT_EQ(d.hash, fnv1a(text));
  // Every token's bytes together are the text (ASCII): bits per character use this.
  EXPECT_EQ(target_bytes(tok, ids.data(), n), (int64_t)text.size());

  // Training windows lie in the training part, y = x shifted by one.
  Batch b = train_batch(d, 42, 1, 6, ctx);
  ASSERT_EQ(b.T, ctx);
  for (int64_t r = 0; r < b.rows; r++) {
    std::vector<int32_t> w(b.x.begin() + r * ctx, b.x.begin() + (r + 1) * ctx);
    w.push_back(b.y[(size_t)((r + 1) * ctx - 1)]);
    for (int64_t t = 0; t + 1 < ctx; t++) EXPECT_EQ(b.y[(size_t)(r * ctx + t)], b.x[(size_t)(r * ctx + t + 1)]);
    auto at = std::search(ids.begin(), ids.begin() + d.n_train, w.begin(), w.end());
    EXPECT_NE(at, ids.begin() + d.n_train) << "row " << r;
  }
  // Validation: the non-overlapping windows of the last 10%, B at a time.
  const int64_t windows = (n - d.n_train - 1) / ctx;
  EXPECT_EQ(token_val_batches(d, 4, ctx), (windows + 3) / 4);
  EXPECT_EQ(d.val_targets, windows * ctx);
  int64_t seen = 0, bytes = 0;
  for (int64_t i = 0; i < token_val_batches(d, 4, ctx); i++) {
    Batch v = val_batch(d, i, 4, ctx);
    for (int64_t r = 0; r < v.rows; r++, seen++) {
      auto at = ids.begin() + d.n_train + seen * ctx;
      EXPECT_TRUE(std::equal(v.x.begin() + r * ctx, v.x.begin() + (r + 1) * ctx, at));
      EXPECT_TRUE(std::equal(v.y.begin() + r * ctx, v.y.begin() + (r + 1) * ctx, at + 1));
    }
    bytes += target_bytes(tok, v.y.data(), v.rows * v.T);
  }
  EXPECT_EQ(seen, windows);
  std::vector<int32_t> val_targets(ids.begin() + d.n_train + 1, ids.begin() + d.n_train + 1 + windows * ctx);
  EXPECT_EQ(bytes, (int64_t)tok.decode(val_targets).size());
  EXPECT_NE(describe(d, ctx).find("plain text"), std::string::npos);

  // Too short for the context: refused, in tokens.
  std::string e = test::error_of([&] { load_token_data(write("short.txt", "Just a few words."), tok, 32); });
  EXPECT_NE(e.find("short.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("tokens is too short for a context of 32"), std::string::npos) << e;
}

TEST(LoraData, MultiTurnWithAPrefixStableTemplateIsOneSequence) {
  // Qwen2.5's ChatML template renders history as it rendered each turn: one sequence, both
  // replies scored, the user turns between them not.
  Tokenizer tok = byte_tokenizer(template_file("qwen2.5-7b-instruct"));
  std::string line = conversation({message("user", "Hi"), message("assistant", "Hello!"), message("user", "Bye"),
                                   message("assistant", "Goodbye.")});
  TokenData d = load_token_data(write("multi.jsonl", line + line), tok, 512);
  EXPECT_EQ(d.sequences(), 2);
  EXPECT_EQ(d.resplit, 0);
  Batch b = val_batch(d, 0, 1, 512);
  EXPECT_EQ(scored_text(tok, b.y, 1, b.T)[0], "Hello!<|im_end|>\nGoodbye.<|im_end|>\n");
  EXPECT_EQ(sequence_text(tok, d, 1),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\nGoodbye.<|im_end|>\n");
}

TEST(LoraData, MultiTurnWithQwen3IsASequencePerTurn) {
  // Qwen3 drops an earlier turn's think block once the user speaks again, so each turn is its
  // own sequence: the history as the engine will render it, then the reply as the model writes it.
  const Tokenizer& tok = qwen3();
  std::string line = conversation({message("user", "Hi"), message("assistant", "Hello!"), message("user", "Bye"),
                                   message("assistant", "Goodbye.")});
  TokenData d = load_token_data(write("multi_qwen3.jsonl", line + line), tok, 128);
  EXPECT_EQ(d.conversations, 2);
  EXPECT_EQ(d.sequences(), 4);
  EXPECT_EQ(d.resplit, 2);
  EXPECT_EQ(d.n_train, 2);
  Batch b = val_batch(d, 0, 4, 128);
  ASSERT_EQ(b.rows, 2);
  auto replies = scored_text(tok, b.y, 2, b.T);
  EXPECT_EQ(replies[0], "<think>\n\n</think>\n\nHello!<|im_end|>\n");
  EXPECT_EQ(replies[1], "<think>\n\n</think>\n\nGoodbye.<|im_end|>\n");
  // The second turn's sequence: the first reply as history (no think block), then its own.
  EXPECT_EQ(sequence_text(tok, d, 3),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nGoodbye.<|im_end|>\n");
  EXPECT_NE(describe(d, 128).find("2 split turn by turn"), std::string::npos) << describe(d, 128);
}

TEST(LoraData, TruncatesLongConversationsAndSkipsThoseWithoutReplies) {
  const Tokenizer& tok = qwen3();
  std::string long_reply, long_question;
  for (int i = 0; i < 40; i++) long_reply += "word" + std::to_string(i) + " ";
  for (int i = 0; i < 40; i++) long_question += "ask" + std::to_string(i) + " ";
  const int64_t ctx = 24;
  std::string text = qa("Hi", long_reply)                                // cut to 25 tokens
                     + qa(long_question, "Fine.")                        // the reply is past the cut: skipped
                     + conversation({message("user", "Anyone there?")})  // no assistant: skipped
                     + "\n   \n"                                         // blank lines are not conversations
                     + conversation({message("assistant", "Welcome!")})  // an opening message is context
                     + qa("Hi", "Hello.") + qa("Yo", "Hey.");
  TokenData d = load_token_data(write("cut.jsonl", text), tok, ctx);
  EXPECT_EQ(d.conversations, 3);
  EXPECT_EQ(d.skipped, 3);
  EXPECT_EQ(d.truncated, 1);
  EXPECT_EQ(d.starts[1] - d.starts[0], ctx + 1);
  for (int64_t s = 0; s < d.sequences(); s++) EXPECT_LE(d.starts[(size_t)s + 1] - d.starts[(size_t)s], ctx + 1);
  std::string line = describe(d, ctx);
  EXPECT_NE(line.find("1 cut to 25 tokens"), std::string::npos) << line;
  EXPECT_NE(line.find("3 skipped"), std::string::npos) << line;
  // The cut sequence's targets are the reply's first tokens, still scored up to the cut.
  Batch b = train_batch(d, 1, 1, 8, ctx);
  EXPECT_LE(b.T, ctx);
}

TEST(LoraData, AnOpeningAssistantMessageIsContext) {
  const Tokenizer& tok = qwen3();
  std::string line =
      conversation({message("assistant", "Welcome!"), message("user", "Hi"), message("assistant", "Hello!")});
  TokenData d = load_token_data(write("opening.jsonl", line + line), tok, 64);
  Batch b = val_batch(d, 0, 1, 64);
  EXPECT_EQ(scored_text(tok, b.y, 1, b.T)[0], "<think>\n\n</think>\n\nHello!<|im_end|>\n");
  EXPECT_EQ(sequence_text(tok, d, 1),
            "<|im_start|>assistant\nWelcome!<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n");
}

TEST(LoraData, DetectsChatByContentAndReadsCrlf) {
  const Tokenizer& tok = qwen3();
  std::string text = qa("Hi", "Hello.") + qa("Yo", "Hey.");
  TokenData a = load_token_data(write("chat_named.txt", "\n" + text), tok, 64);
  EXPECT_TRUE(a.chat);
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  TokenData b = load_token_data(write("crlf.jsonl", "\xEF\xBB\xBF" + crlf), tok, 64);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.scored, b.scored);
  // A text that merely starts with JSON of another shape is text.
  std::string t = "{\"title\": \"notes\"}\n";
  for (int i = 0; i < 100; i++) t += "Some plain text, line " + std::to_string(i) + ".\n";
  EXPECT_FALSE(load_token_data(write("json_head.txt", t), tok, 32).chat);
}

TEST(LoraData, BadChatLinesNameTheFileTheLineAndItsStart) {
  const Tokenizer& tok = qwen3();
  const std::string good = qa("Hi", "Hello.");
  struct Case {
    const char* name;
    std::string bad_line;
    const char* says;
  };
  const std::string long_bad = "{\"messages\": " + std::string(200, 'x');
  const Case cases[] = {
      {"not_json", "{\"messages\": [", "not JSON"},
      {"array", "[1, 2]", "expected an object with a \"messages\" array, got an array"},
      {"no_messages", "{\"msgs\": []}", "no \"messages\" array"},
      {"messages_string", "{\"messages\": \"hi\"}", "\"messages\" is a string, not an array"},
      {"empty_messages", "{\"messages\": []}", "\"messages\" is empty"},
      {"message_string", "{\"messages\": [\"hi\"]}", "message 1 is a string, not an object"},
      {"no_content", "{\"messages\": [{\"role\": \"user\"}]}", "message 1 has no \"content\""},
      {"null_content",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": null}]}",
       "message 2's \"content\" is null, not a string"},
      {"parts_content", "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
       "message 1's \"content\" is an array, not a string"},
      {"number_role", "{\"messages\": [{\"role\": 1, \"content\": \"a\"}]}", "message 1's \"role\" is a number"},
      {"sharegpt", "{\"messages\": [{\"from\": \"human\", \"value\": \"a\"}]}", "message 1 has no \"role\""},
      {"not_utf8", "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xE9\"}]}", "not UTF-8"},
      {"long", long_bad, "not JSON"},
  };
  for (const Case& c : cases) {
    std::string name = std::string("bad_") + c.name + ".jsonl";
    std::string e =
        test::error_of([&] { load_token_data(write(name, good + "\n" + c.bad_line + "\n" + good), tok, 64); });
    SCOPED_TRACE(c.name);
    EXPECT_NE(e.find(name + ":3:"), std::string::npos) << e;  // the file and the line (a blank line 2)
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
    // The line's start, at most 60 characters of it.
    std::string start = c.bad_line.substr(0, 20);
    if (std::string(c.name) != "not_utf8") {
      EXPECT_NE(e.find(start), std::string::npos) << e;
    }
    EXPECT_LT(e.size(), 400u) << e;
  }
  std::string e = test::error_of([&] { load_token_data(write("bad_long.jsonl", long_bad + "\n"), tok, 64); });
  EXPECT_NE(e.find(long_bad.substr(0, 57) + "..."), std::string::npos) << e;
  EXPECT_EQ(e.find(long_bad.substr(0, 58)), std::string::npos) << e;
}

TEST(LoraData, BadChatFilesAreRefusedClearly) {
  const Tokenizer& tok = qwen3();
  auto refuse = [&](const std::string& name, const std::string& text, const char* says, const Tokenizer& t) {
    std::string e = test::error_of([&] { load_token_data(write(name, text), t, 64); });
    EXPECT_NE(e.find(name), std::string::npos) << e;
    EXPECT_NE(e.find(says), std::string::npos) << e;
  };
  refuse("empty.jsonl", "", "the file is empty", tok);
  refuse("blank.jsonl", "\n  \n\n", "no conversations", tok);
  refuse("no_assistant.jsonl", conversation({message("user", "a")}) + conversation({message("user", "b")}),
         "no usable conversation", tok);
  refuse("one.jsonl", qa("Hi", "Hello."), "at least 2 are needed", tok);
  refuse("huge_line.jsonl", qa("Hi", "Hello.") + std::string((1 << 20) + 10, ' ') + "\n",
         "huge_line.jsonl:2: the line is longer than 1 MB", tok);
  refuse("many_lines.jsonl", std::string(1000001, '\n'), "more than 1000000 lines", tok);
  // A base without a chat template.
  Tokenizer none = byte_tokenizer("");
  std::string e =
      test::error_of([&] { load_token_data(write("no_template.jsonl", qa("a", "b") + qa("c", "d")), none, 64); });
  EXPECT_NE(e.find("no_template.jsonl"), std::string::npos) << e;
  EXPECT_NE(e.find("chat template"), std::string::npos) << e;
  EXPECT_NE(e.find("plain text"), std::string::npos) << e;
  // A template whose generation prompt is not how it renders the reply: the reply's tokens
  // cannot be found, so training refuses rather than guess.
  Tokenizer odd = byte_tokenizer(
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}ASSISTANT:{% endif %}");
  e = test::error_of([&] { load_token_data(write("odd_template.jsonl", qa("a", "b") + qa("c", "d")), odd, 64); });
  EXPECT_NE(e.find("odd_template.jsonl:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("does not render message 2 (assistant) as a continuation"), std::string::npos) << e;
  // A template that raises on a role it does not know: the file, the line and the template's words.
  Tokenizer strict = byte_tokenizer(
      "{% for m in messages %}"
      "{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('unknown role ' + m.role) }}{% endif %}"
      "<{{ m.role }}>\n{{ m.content }}</s>\n{% endfor %}"
      "{% if add_generation_prompt %}<assistant>\n{% endif %}");
  e = test::error_of([&] {
    load_token_data(
        write("role.jsonl", qa("a", "b") + conversation({message("narrator", "x"), message("assistant", "y")})), strict,
        64);
  });
  EXPECT_NE(e.find("role.jsonl:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown role narrator"), std::string::npos) << e;
  // Missing files and folders, binary text: as the character trainer says them.
  refuse("nul.txt", std::string("text\0more", 9), "NUL byte", tok);
  e = test::error_of([&] { load_token_data(join_path(dir(), "missing.jsonl"), tok, 64); });
  EXPECT_NE(e.find("missing.jsonl: no such file"), std::string::npos) << e;
}
