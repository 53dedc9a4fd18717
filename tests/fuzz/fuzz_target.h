// How a fuzz target declares its entry point, so one source serves two builds:
// - tools/fuzz (clang, -fsanitize=fuzzer): SHARDRT_FUZZ_TARGET(name) is libFuzzer's LLVMFuzzerTestOneInput and
//   SHARDRT_FUZZ_INIT(name) its LLVMFuzzerInitialize; one target per executable.
// - the corpus replay (tests/fuzz/replay_main.cpp, the normal compiler, SHARDRT_FUZZ_REPLAY defined): every target
//   links into one program, so each entry point gets a name of its own and registers itself here; the replay runs
//   each committed seed of tests/fuzz/corpus/<name>/ through it (ctest fuzz_corpus_replay).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace shardrt::fuzz {

using TargetFn = int (*)(const uint8_t* data, std::size_t size);
using InitFn = void (*)();

struct TargetEntry {
  TargetFn run = nullptr;
  InitFn init = nullptr;  // called once, before the first input (the capi target's MPI and context)
};

// name -> entry; filled by the static registrars below before main runs.
inline std::map<std::string, TargetEntry>& targets() {
  static std::map<std::string, TargetEntry> all;
  return all;
}
inline bool register_target(const char* name, TargetFn run) {
  targets()[name].run = run;
  return true;
}
inline bool register_init(const char* name, InitFn init) {
  targets()[name].init = init;
  return true;
}

}  // namespace shardrt::fuzz

#ifdef SHARDRT_FUZZ_REPLAY
#define SHARDRT_FUZZ_TARGET(name)                                                                                 \
  static int shardrt_fuzz_run_##name(const uint8_t* data, std::size_t size);                                     \
  [[maybe_unused]] static const bool shardrt_fuzz_registered_##name =                                            \
      shardrt::fuzz::register_target(#name, shardrt_fuzz_run_##name);                                            \
  static int shardrt_fuzz_run_##name(const uint8_t* data, std::size_t size)
#define SHARDRT_FUZZ_INIT(name)                                                                                   \
  static void shardrt_fuzz_init_##name();                                                                         \
  [[maybe_unused]] static const bool shardrt_fuzz_init_registered_##name =                                       \
      shardrt::fuzz::register_init(#name, shardrt_fuzz_init_##name);                                             \
  static void shardrt_fuzz_init_##name()
#else
#define SHARDRT_FUZZ_TARGET(name) extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size)
#define SHARDRT_FUZZ_INIT(name)                                                                                   \
  static void shardrt_fuzz_init_##name();                                                                         \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {                                                            \
    shardrt_fuzz_init_##name();                                                                                   \
    return 0;                                                                                                     \
  }                                                                                                               \
  static void shardrt_fuzz_init_##name()
#endif
