// libFuzzer target: shardrt-train's configuration as a user gives it, a config file plus --set overrides, read by
// tools::load_train_config (defaults, the file's keys, the overrides, the typed struct: the optimizer section and
// the sharding-mode and algorithm names through optim/optimizer_json and optim/optimizer_config), then the schedule
// the run would build from it (optim::schedule_from_json).
//
// Input: the config file's text, then any number of lines "\n--set KEY=VALUE", each one override (so a seed reads
// like a command line). An input that starts with "--set " has no file: the defaults and the overrides alone.
//
// Whatever load_train_config accepts must survive its own document: the merged document written back as a file and
// read again gives the same document and the same typed fields (the run saves it next to its metrics and a rerun
// reads it). The name parsers must round-trip the names they accepted.
//
// Sources: runtime/ + tools/train_config.cpp, optim/optimizer_json.cpp, optim/optimizer_config.cpp,
// optim/schedule.cpp (see tools/fuzz): none of them needs the mesh or autograd.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer_json.h"
#include "runtime/errors.h"
#include "tests/fuzz/fuzz_input_file.h"
#include "tests/fuzz/fuzz_target.h"
#include "tools/train_config.h"

namespace {

struct Split {
  std::string file;  // "" : no config file
  bool has_file = false;
  std::vector<std::string> overrides;
};

Split split_input(const std::string& text) {
  static const std::string marker = "\n--set ";
  Split s;
  size_t pos = 0;
  if (text.rfind("--set ", 0) == 0) {
    pos = 0;  // overrides only
  } else {
    const size_t first = text.find(marker);
    s.file = text.substr(0, first);
    s.has_file = true;
    if (first == std::string::npos) return s;
    pos = first + 1;
  }
  while (pos < text.size()) {  // text[pos..] starts with "--set "
    const size_t begin = pos + 6;
    const size_t next = text.find(marker, begin);
    s.overrides.push_back(text.substr(begin, next == std::string::npos ? std::string::npos : next - begin));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return s;
}

bool same_fields(const shardrt::tools::TrainConfig& a, const shardrt::tools::TrainConfig& b) {
  return a.model_kind == b.model_kind && a.model_args == b.model_args && a.model_seed == b.model_seed &&
         a.dtype == b.dtype && a.optimizer.algorithm == b.optimizer.algorithm && a.optimizer.mode == b.optimizer.mode &&
         a.optimizer.accumulation_steps == b.optimizer.accumulation_steps && a.base_lr == b.base_lr &&
         a.schedule == b.schedule && a.loss == b.loss && a.huber_delta == b.huber_delta &&
         a.train_manifest == b.train_manifest && a.batch_size == b.batch_size && a.ddp == b.ddp &&
         a.domain == b.domain && a.steps == b.steps && a.epochs == b.epochs && a.log_every == b.log_every &&
         a.checkpoint_dir == b.checkpoint_dir && a.progress_bar == b.progress_bar;
}

}  // namespace

SHARDRT_FUZZ_TARGET(training_config) {
  using namespace shardrt;
  const Split in = split_input(std::string(reinterpret_cast<const char*>(data), size));
  const std::string& path = fuzz::scratch_path("training_config");
  if (in.has_file && !fuzz::write_scratch(path, reinterpret_cast<const uint8_t*>(in.file.data()), in.file.size()))
    return 0;
  tools::TrainConfig c;
  try {
    c = tools::load_train_config(in.has_file ? path : std::string(), in.overrides);
  } catch (const Error&) {
    return 0;  // refused with a typed error: what the CLI prints
  }
  // Accepted: its names parse back to themselves.
  if (optim::parse_sharding_mode(optim::sharding_mode_name(c.optimizer.mode)) != c.optimizer.mode) __builtin_trap();
  if (optim::parse_algorithm(optim::algorithm_name(c.optimizer.algorithm)) != c.optimizer.algorithm) __builtin_trap();
  // The document as run, written and read back: the same run.
  const std::string written = c.document.dump();
  if (!fuzz::write_scratch(path, reinterpret_cast<const uint8_t*>(written.data()), written.size())) return 0;
  const tools::TrainConfig again = tools::load_train_config(path, {});  // must not throw: it was accepted once
  if (again.document != c.document || !same_fields(c, again)) __builtin_trap();

  // The schedule the run builds, over a run of this length (shardrt-train: steps, or epochs x batches per epoch;
  // 7 batches stand in for the data set's), evaluated where its phases change.
  const int64_t total = c.steps > 0 ? c.steps : c.epochs * 7;
  try {
    const auto schedule = optim::schedule_from_json(c.schedule, total, "fuzz");
    volatile double sink = 0;
    for (const int64_t t : {int64_t{0}, int64_t{1}, total / 2, total - 1, total, total + 1})
      sink = sink + schedule->factor(t);
    (void)schedule->describe();
  } catch (const Error&) {
  }
  return 0;
}
