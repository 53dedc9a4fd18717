// autograd/ops/softmax: softmax and log_softmax forward against the definition, gradcheck over dims, strided and
// zero-size inputs.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("softmax and log_softmax: forward, gradcheck over dims, strided and zero-size inputs", "[dense]") {
  Generator gen(41);
  for (bool log : {false, true}) {
    auto op = [log](const Tensor& x, int dim) { return log ? log_softmax(x, dim) : softmax(x, dim); };
    for (int dim : {0, 1, 2, -1, -2}) {
      INFO((log ? "log_softmax" : "softmax") << " dim " << dim);
      Tensor x = requiring_grad(normal({2, 3, 4}, gen));
      require_close(op(x, dim), ref_softmax(x, dim, log));
      require_gradcheck([&](const std::vector<Tensor>& in) { return op(in[0], dim); }, {x});
    }
    Tensor x = normal({3, 4}, gen);
    require_close(op(x.transpose(0, 1), 1), ref_softmax(x.transpose(0, 1), 1, log));
    require_gradcheck([&](const std::vector<Tensor>& in) { return op(swap_last(in[0]), -1); },
                      {requiring_grad(normal({3, 4}, gen))});
    require_zero_size_ok([&](const std::vector<Tensor>& in) { return op(in[0], 1); }, {zeros({0, 4}, kF64)}, {0, 4});
    require_f32_matches_f64([&](const std::vector<Tensor>& in) { return op(in[0], 1); }, {normal({3, 5}, gen)});
  }
}
