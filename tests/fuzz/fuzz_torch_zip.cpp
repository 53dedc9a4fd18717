// libFuzzer target: load_weights on arbitrary bytes. Its format sniffing sends zip inputs through the .mdlus reader
// or the torch.save reader (libzip, entry size checks, the restricted unpickler, tensor-vs-storage checks), tar
// inputs through the legacy .mdlus reader and the rest through safetensors; key normalisation runs on all of them.
// Sources: runtime/ (see tools/fuzz).
#include <cstdint>

#include "runtime/errors.h"
#include "runtime/weights.h"
#include "tests/fuzz/fuzz_input_file.h"
#include "tests/fuzz/fuzz_target.h"

SHARDRT_FUZZ_TARGET(torch_zip) {
  const std::string& path = shardrt::fuzz::scratch_path("torch_zip");
  if (!shardrt::fuzz::write_scratch(path, data, size)) return 0;
  volatile uint64_t sink = 0;
  try {
    shardrt::LoadedWeights w = shardrt::load_weights(path);
    for (const auto& [name, t] : w.tensors) {
      if (!t.is_contiguous()) __builtin_trap();
      sink = sink + shardrt::fuzz::touch_bytes(t.raw_data(), t.nbytes()) + name.size();
    }
    if (w.args) sink = sink + w.args->dump().size();
  } catch (const shardrt::Error&) {
  }
  return 0;
}
