// libFuzzer target: a model config as JSON text, read through models/config.h the way the model builders do:
// args_from_mdlus unwraps an .mdlus args.json, then a ConfigReader is asked for every key of the object with the
// getter the input's first byte selects (so each key meets integer, number, boolean, string and list getters
// across runs), plus one absent key with a default, then finish().
// Sources: runtime/ + models/config.cpp (see tools/fuzz). The per-model readers (ViTConfig::from_json,
// read_transolver_config, read_geotransolver_config) sit in files that pull in the whole model stack, so they are
// not linked here.
#include <cstdint>
#include <string>

#include "models/config.h"
#include "runtime/errors.h"
#include "tests/fuzz/fuzz_target.h"

SHARDRT_FUZZ_TARGET(model_config) {
  using shardrt::models::Json;
  if (size < 1) return 0;
  const unsigned selector = data[0];
  Json parsed;
  try {
    parsed = Json::parse(data + 1, data + size);
  } catch (const Json::exception&) {  // parse_error, or out_of_range for a number like 1e400
    return 0;  // not JSON: the config loaders turn this into an IoError before a ConfigReader exists
  }
  try {
    const Json args = shardrt::models::args_from_mdlus(parsed);
    shardrt::models::ConfigReader reader("FuzzModel", args);
    unsigned k = selector;
    if (args.is_object()) {
      for (auto it = args.begin(); it != args.end(); ++it, k = k * 5 + 1) {
        const std::string& key = it.key();
        switch (k % 8) {
          case 0: (void)reader.integer(key, 3); break;
          case 1: (void)reader.integer(key); break;
          case 2: (void)reader.optional_integer(key); break;
          case 3: (void)reader.number(key, 0.5); break;
          case 4: (void)reader.boolean(key, true); break;
          case 5: (void)reader.string(key, "gelu"); break;
          case 6: (void)reader.integers(key, {1, 2}, (k & 8) != 0); break;
          case 7: (void)reader.optional_integers(key); break;
        }
      }
    }
    if (reader.integer("__fuzz_absent_key__", 7) != 7) __builtin_trap();  // an absent key is its default
    reader.finish();
  } catch (const shardrt::Error&) {
  }
  return 0;
}
