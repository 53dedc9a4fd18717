// compare_outputs RESULT.safetensors GOLDEN.safetensors RTOL: every tensor of RESULT (what shardrt-infer wrote:
// output, grad_input.<name>, grad.<param>) against the same key of GOLDEN, relative error max|a-b| / max|b|. Exits 0
// when all are within RTOL and RESULT holds every output of GOLDEN and, when it holds grads, every input grad and
// every parameter grad GOLDEN has; prints one line per key.
// A golden grad that is an exact zero up to round-off (max below kZeroGrad of the golden's largest grad: GeoTransolver's
// cross_k biases, which a softmax over the keys cancels) has no meaningful relative error; the result's must then be
// below kZeroGradResult of the largest grad instead.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "runtime/safetensors.h"

using namespace shardrt;

namespace {
constexpr double kZeroGrad = 1e-14, kZeroGradResult = 1e-12;

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::fmax(m, std::fabs(v));
  return m;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_outputs RESULT.safetensors GOLDEN.safetensors RTOL\n");
    return 2;
  }
  try {
    const SafetensorsFile got = load_safetensors(argv[1]), want = load_safetensors(argv[2]);
    const double rtol = std::atof(argv[3]);
    int bad = 0, compared = 0;
    // A result written without --grad-output holds outputs only: then only the outputs are required.
    bool has_grads = false;
    for (const auto& [key, t] : got.tensors()) has_grads |= key.rfind("grad", 0) == 0;
    double largest_grad = 0;
    for (const auto& [key, t] : want.tensors())
      if (key.rfind("grad.", 0) == 0) largest_grad = std::fmax(largest_grad, max_abs(t));
    for (const auto& [key, t] : got.tensors()) {
      if (!want.contains(key)) {
        std::printf("%-40s not in the golden\n", key.c_str());
        ++bad;
        continue;
      }
      const Tensor& w = want.get(key);
      if (t.shape() != w.shape()) {
        std::printf("%-40s shape %s, golden %s\n", key.c_str(), shape_str(t.shape()).c_str(), shape_str(w.shape()).c_str());
        ++bad;
        continue;
      }
      if (key.rfind("grad.", 0) == 0 && max_abs(w) <= kZeroGrad * largest_grad) {
        const double rel = max_abs(t) / largest_grad;
        const bool ok = rel <= kZeroGradResult;
        bad += ok ? 0 : 1;
        ++compared;
        std::printf("%-40s zero up to round-off: %.3e of the largest grad %s\n", key.c_str(), rel, ok ? "ok" : "TOO LARGE");
        continue;
      }
      const auto a = t.to_vector(), b = w.to_vector();
      double err = 0, scale = 0;
      for (size_t i = 0; i < a.size(); ++i) err = std::fmax(err, std::fabs(a[i] - b[i])), scale = std::fmax(scale, std::fabs(b[i]));
      const double rel = scale > 0 ? err / scale : err;
      const bool ok = rel <= rtol && std::isfinite(rel);
      bad += ok ? 0 : 1;
      ++compared;
      std::printf("%-40s rel %.3e %s\n", key.c_str(), rel, ok ? "ok" : "TOO LARGE");
    }
    // Not vacuous: every output (`output`, or `output.<i>` per stream), every input grad and every parameter grad
    // the golden has must be there.
    auto required = [&](const std::string& key) {
      return key == "output" || key.rfind("output.", 0) == 0 || (has_grads && key.rfind("grad.", 0) == 0) ||
             (has_grads && key.rfind("grad_input.", 0) == 0);
    };
    for (const auto& [key, t] : want.tensors())
      if (required(key) && !got.contains(key)) {
        std::printf("%-40s missing from the result\n", key.c_str());
        ++bad;
      }
    std::printf("%d tensors compared, %d bad\n", compared, bad);
    return bad == 0 && compared > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_outputs: %s\n", e.what());
    return 2;
  }
}
