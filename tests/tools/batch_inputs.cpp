// batch_inputs IN.safetensors OUT.safetensors B: every tensor of IN (each with the batch as its dim 0, as the inputs
// and grad_output files of shardrt-infer are) with B samples: sample i of OUT is sample i mod B_in of IN. So a
// golden's files give the batches a ddp mesh needs to cover smaller than, equal to and larger than its ddp size.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "runtime/safetensors.h"

using namespace shardrt;

int main(int argc, char** argv) {
  if (argc != 4 || std::atoi(argv[3]) < 1) {
    std::fprintf(stderr, "usage: batch_inputs IN.safetensors OUT.safetensors B (B >= 1)\n");
    return 2;
  }
  try {
    const SafetensorsFile in = load_safetensors(argv[1]);
    const int64_t b = std::atoi(argv[3]);
    std::map<std::string, Tensor> out;
    for (const auto& [key, t] : in.tensors()) {
      if (t.dim() == 0 || t.size(0) == 0) throw std::runtime_error(key + " has no batch dim to take samples from");
      std::vector<Tensor> samples;
      for (int64_t i = 0; i < b; ++i) samples.push_back(narrow(t, 0, i % t.size(0), 1));
      out[key] = cat(samples, 0).contiguous();
    }
    save_safetensors(argv[2], out);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "batch_inputs: %s\n", e.what());
    return 2;
  }
}
