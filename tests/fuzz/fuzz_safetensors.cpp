// libFuzzer target: load_safetensors on arbitrary bytes (header length, JSON header, offsets, dtypes, bool bytes).
// Sources: runtime/ (see tools/fuzz).
#include <cstdint>

#include "runtime/errors.h"
#include "runtime/safetensors.h"
#include "tests/fuzz/fuzz_input_file.h"
#include "tests/fuzz/fuzz_target.h"

SHARDRT_FUZZ_TARGET(safetensors) {
  const std::string& path = shardrt::fuzz::scratch_path("safetensors");
  if (!shardrt::fuzz::write_scratch(path, data, size)) return 0;
  volatile uint64_t sink = 0;
  try {
    shardrt::SafetensorsFile file = shardrt::load_safetensors(path);
    for (const auto& [name, t] : file.tensors()) {
      sink = sink + shardrt::fuzz::touch_bytes(t.raw_data(), t.nbytes()) + name.size();
      // A loaded tensor must be exactly what its header says: numel x element size, contiguous.
      if (!t.is_contiguous()) __builtin_trap();
    }
    for (const auto& [k, v] : file.metadata()) sink = sink + k.size() + v.size();
  } catch (const shardrt::Error&) {
  }
  return 0;
}
