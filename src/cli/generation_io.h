// What run and chat share: Ctrl-C handling, prompt building, streaming output and the stats line.
#pragma once
#include <atomic>
#include <csignal>
#include <string>
#include <vector>

#include "cli/common.h"
#include "runtime/generate.h"

namespace kvad::cli {

// Set by SIGINT (or the signal given) while a handler is installed; generation polls it and stops
// the current answer.
extern std::atomic<bool> g_interrupted;
void install_interrupt_handler(int signal_number = SIGINT);

GenerateOptions generate_options(const LoadedModel& m, const SamplingArgs& s);
// Renders messages with the model's chat template (errors if it has none) and tokenizes them.
std::vector<int32_t> chat_prompt(const LoadedModel& m, const OrderedJson& messages);
// "prompt 12 tokens (8 cached) | prefill 345.6 tok/s | 64 tokens, decode 21.3 tok/s | stop | seed 7"
std::string stats_line(const GenerateResult& r, uint64_t seed);

}  // namespace kvad::cli
