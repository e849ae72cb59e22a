// The training data of a LoRA fine-tune: a --data file as the base model's tokens. Two kinds:
//   plain text   tokenized whole (no special tokens added), split 90/10 by tokens; training
//                batches are random (T+1)-token windows of the first part, validation the
//                non-overlapping T-token windows of the second, as data.h does with characters.
//   chat JSONL   one {"messages": [{"role": ..., "content": ...}, ...]} a line (a file named
//                *.jsonl, or whose first non-blank line is such an object), rendered with the
//                base's chat template and encoded as the engine encodes a chat prompt (special
//                tokens parsed, none added). Only assistant turns are targets: for assistant
//                message i, the tokens of render(messages 1..i) that follow those of
//                render(messages 1..i-1 + the generation prompt), i.e. the reply and the
//                template's end of turn (a template where the latter is not a prefix of the
//                former is refused, naming the line). Turns stay in one
//                sequence while each turn's prompt starts with the sequence so far; a template
//                that renders earlier turns differently later (Qwen3 drops their think block)
//                gets a sequence per turn, each with the history the engine will give it. An
//                opening assistant message is context. The last 10% of conversations are
//                validation.
// Batches are [B*T] token ids x and targets y with y = -1 where nothing is scored (padding, the
// system and user tokens), which cross_entropy skips.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvad {
class Tokenizer;
}

namespace kvad::train {

struct TokenData {
  std::string path;
  bool chat = false;  // chat JSONL (else plain text)
  uint64_t hash = 0;  // FNV-1a of the file's bytes (data.h's fnv1a): a resumed run checks it
  int64_t bytes = 0;  // the file's size
  int32_t pad = 0;    // the x of padding positions (chat): the tokenizer's eos, else 0

  // Plain text: the text's tokens, ids[0, n_train) for training. Chat: the sequences one after
  // another, sequence s = ids[starts[s], starts[s+1]) (at most context + 1 tokens), scored[i] = 1
  // where ids[i] is an assistant token; sequences [0, n_train) are the training conversations'.
  std::vector<int32_t> ids;
  std::vector<uint8_t> scored;
  std::vector<int64_t> starts;
  int64_t n_train = 0;

  // For the summary line. Tokens and targets (the tokens a batch scores) of each part;
  // conversations: usable ones (those with a target), of which val_conversations are validation;
  // truncated: sequences cut to context + 1 tokens; skipped: conversations left with no assistant
  // token (none, or all past the cut); resplit: conversations whose template renders an earlier
  // turn differently once later turns follow (Qwen3 drops the empty <think> block), trained as one
  // sequence per such turn so each turn sees the context the engine gives it.
  int64_t train_tokens = 0, val_tokens = 0, train_targets = 0, val_targets = 0;
  int64_t conversations = 0, val_conversations = 0, truncated = 0, skipped = 0, resplit = 0;

  int64_t sequences() const { return starts.empty() ? 0 : (int64_t)starts.size() - 1; }
};

// Reads, checks and tokenizes a --data file for sequences of `context` tokens. Errors name the
// file (and for chat JSONL the line, with the start of its text): a missing, empty, binary or
// non-UTF-8 file; plain text too short for one context window in either part; a JSONL line that
// is not an object with a "messages" array of {"role": string, "content": string} objects, over
// 1 MB, or past the 1,000,000th; a template that does not render an assistant turn as a
// continuation of its generation prompt; a base without a chat template; no usable conversation,
// or fewer than 2.
TokenData load_token_data(const std::string& path, const Tokenizer& tok, int64_t context);

// The training batch of a step, from a generator seeded by (seed, step) as sample_batch's (a
// resumed run draws the same batches). Fills x, y [B*T] (each must hold B*context) and returns T:
// plain text T = context (random windows); chat the longest of the B drawn sequences minus one,
// shorter ones padded (x = pad, y = -1), y = -1 also on non-assistant targets.
int64_t token_batch(const TokenData& d, uint64_t seed, int64_t step, int64_t B, int64_t context, int32_t* x,
                    int32_t* y);
// Validation in batches of up to B rows: the non-overlapping context-long windows of the plain
// text's validation part, or the validation conversations in order. Batch i fills x, y [rows*T],
// sets rows, returns T. `context` is always the one given to load_token_data.
int64_t token_val_batches(const TokenData& d, int64_t B, int64_t context);
int64_t token_val_batch(const TokenData& d, int64_t i, int64_t B, int64_t context, int32_t* x, int32_t* y,
                        int64_t* rows);

// The bytes of text behind the scored targets of y[0, n) (Σ tok.token_bytes(y[i]).size() over
// y[i] >= 0): bits per character = nats / ln 2 / this.
int64_t target_bytes(const Tokenizer& tok, const int32_t* y, int64_t n);

// One line for the start of a run: the kind, tokens and targets of each part, and for chat the
// conversations, truncated and skipped counts.
std::string describe(const TokenData& d, int64_t context);

}  // namespace kvad::train
