// Writes the FLARE golden case's weights in every export format, for tools/golden/check_mdlus_export.py to open with
// PhysicsNeMo and torch: <out>/<case>.mdlus, <out>/<case>.pt, <out>/<case>.safetensors, and <out>/<case>.keys.json
// (the key order written). Usage: export_golden_weights <test data dir> <out dir> [case, default flare_irregular]
#include <cstdio>
#include <fstream>
#include <string>

#include "optim/checkpoint.h"
#include "tests/optim/golden_export.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <test data dir> <out dir> [golden case]\n", argv[0]);
    return 2;
  }
  const std::string data = argv[1], out = argv[2], golden_case = argc > 3 ? argv[3] : "flare_irregular";
  try {
    const auto sd = shardrt::test::flare_golden_state_dict(data, golden_case);
    shardrt::export_mdlus(out + "/" + golden_case + ".mdlus", sd.tensors, sd.key_order, sd.args);
    shardrt::export_torch(out + "/" + golden_case + ".pt", sd.tensors, sd.key_order);
    shardrt::export_safetensors(out + "/" + golden_case + ".safetensors", sd.tensors);
    std::ofstream(out + "/" + golden_case + ".keys.json") << nlohmann::json(sd.key_order).dump();
    std::printf("wrote %s/%s.{mdlus,pt,safetensors,keys.json}: %zu tensors\n", out.c_str(), golden_case.c_str(),
                sd.key_order.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "export_golden_weights: %s\n", e.what());
    return 1;
  }
  return 0;
}
