// A program built only from the installed headers and `pkg-config --cflags --libs shardrt`, as a simulation
// code would: if it compiles, links and prints the right number, the install is usable.
#include <cstdio>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/factories.h"

int main() {
  using namespace shardrt;
  Tensor w = from_vector({1, 2, 3}, {3}, {DType::f64});
  set_requires_grad(w);
  Tensor loss = sum(mul(w, w));  // d/dw sum(w^2) = 2w
  backward(loss);
  auto g = grad_of(w).to_vector();
  bool ok = loss.item() == 14 && g == std::vector<double>{2, 4, 6};
  std::printf("consumer: loss %g grad [%g %g %g] %s\n", loss.item(), g[0], g[1], g[2], ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
