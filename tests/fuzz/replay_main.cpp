// fuzz_corpus_replay: every committed seed of every fuzz target, run once through the target's own entry point,
// built by the normal compiler (ctest fuzz_corpus_replay, and under tools/test --sanitize's ASan + UBSan build).
// The libFuzzer builds (tools/fuzz) need clang and minutes of build; this needs neither, so CI replays every seed
// (the hostile ones and each crash reproducer kept in the corpus) in each of its configurations.
//
// Usage: fuzz_corpus_replay CORPUS_DIR [TARGET...]   (CORPUS_DIR holds one folder per target; no TARGET: all)
// A seed that crashes ends the program there (the target traps, or an exception that is not a typed ShardRT error
// escapes); the last line printed names the seed. Exit 0: every seed of every target ran; 1: a target has no
// seeds or a folder is missing.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [TARGET...]\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  std::vector<std::string> wanted(argv + 2, argv + argc);
  if (wanted.empty())
    for (const auto& [name, entry] : shardrt::fuzz::targets()) wanted.push_back(name);
  // The file readers' scratch files go to a folder of this run, removed at the end.
  const fs::path scratch = fs::temp_directory_path() / ("shardrt-fuzz-replay-" + std::to_string(getpid()));
  fs::create_directories(scratch);
  setenv("SHARDRT_FUZZ_TMP", scratch.c_str(), 1);
  int status = 0;
  for (const std::string& name : wanted) {
    const auto it = shardrt::fuzz::targets().find(name);
    if (it == shardrt::fuzz::targets().end()) {
      std::fprintf(stderr, "fuzz_corpus_replay: no target '%s' in this program\n", name.c_str());
      status = 1;
      continue;
    }
    std::vector<fs::path> seeds;
    if (fs::is_directory(corpus / name))
      for (const auto& e : fs::directory_iterator(corpus / name))
        if (e.is_regular_file()) seeds.push_back(e.path());
    std::sort(seeds.begin(), seeds.end());
    if (seeds.empty()) {
      std::fprintf(stderr, "fuzz_corpus_replay: %s: no seeds in %s\n", name.c_str(), (corpus / name).c_str());
      status = 1;
      continue;
    }
    if (it->second.init) it->second.init();
    size_t bytes = 0;
    for (const fs::path& seed : seeds) {
      std::ifstream f(seed, std::ios::binary);
      const std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      std::fprintf(stderr, "replay %s\n", seed.c_str());  // the last line names a seed that crashes
      it->second.run(data.data(), data.size());
      bytes += data.size();
    }
    std::printf("fuzz_corpus_replay: %-17s %3zu seeds, %7zu bytes: ok\n", name.c_str(), seeds.size(), bytes);
  }
  fs::remove_all(scratch);
  return status;
}
