// Helpers shared by the mesh tests: deterministic per-rank data whose sums stay exact in every dtype, and
// comparisons against references computed on the host by every rank.
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "mesh/communicator.h"
#include "runtime/dtype.h"
#include "runtime/factories.h"
#include "runtime/tensor.h"
#include "tests/support/world.h"

namespace shardrt::test {

// The communicator over all ranks that the mesh tests share, built by the first test that asks.
inline const Communicator& world() {
  static Communicator c(MPI_COMM_WORLD, "world");
  return c;
}

// Sets an environment variable for one scope (e.g. SHARDRT_COMM_CHECK while a communicator is built).
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~EnvVar() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  EnvVar(const EnvVar&) = delete;
  EnvVar& operator=(const EnvVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> d = {DType::f64, DType::f32, DType::bf16, DType::f16,
                                       DType::i64, DType::i32, DType::u8};
  return d;
}

// Element i of the data rank `src` contributes to stream `stream`: an integer in [0, 12], so sums over four
// ranks are exact in bf16, f16 and u8.
inline double gen(int src, int64_t i, int stream = 0) {
  return static_cast<double>((src * 7 + i * 3 + stream * 5) % 11 + (src % 2));
}

inline std::vector<double> gen_vec(int src, int64_t n, int stream = 0, int64_t start = 0) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = gen(src, start + i, stream);
  return v;
}

inline Tensor tensor_of(const std::vector<double>& v, DType t, Device d = Device::cpu()) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, {t, d});
}

// Tolerance of one rounding of a value of magnitude ~`scale` in dtype t (exact dtypes: 0).
inline double tolerance(DType t, double scale) {
  switch (t) {
    case DType::bf16:
      return scale / 128.0;
    case DType::f16:
      return scale / 1024.0;
    case DType::f32:
      return scale * 1e-6;
    case DType::f64:
      return scale * 1e-14;
    default:
      return 0.0;
  }
}

inline bool close_to(const std::vector<double>& got, const std::vector<double>& want, DType t, std::string& why) {
  if (got.size() != want.size()) {
    why = "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
    return false;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tolerance(t, std::fabs(want[i]) + 1.0)) {
      why = "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
      return false;
    }
  }
  return true;
}

// CHECKs that tensor t holds `want` (converted to t's dtype precision).
#define CHECK_VALUES(t, want)                                                         \
  do {                                                                                \
    std::string why_;                                                                 \
    bool ok_ = ::shardrt::test::close_to((t).to_vector(), (want), (t).dtype(), why_); \
    INFO(why_);                                                                       \
    CHECK(ok_);                                                                       \
  } while (0)

// Per-rank element counts: even, uneven, with zero-size segments, and all zero.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> count_patterns(int p) {
  std::vector<int64_t> even(p, 3), uneven(p), zeros(p), all_zero(p, 0);
  for (int j = 0; j < p; ++j) {
    uneven[j] = 2 * j + 1;
    zeros[j] = j % 2 == 0 ? 0 : j + 2;  // rank 0 (and every even rank) holds nothing
  }
  return {{"even", even}, {"uneven", uneven}, {"zero-size", zeros}, {"all-zero", all_zero}};
}

inline std::vector<int64_t> prefix(const std::vector<int64_t>& c) {
  std::vector<int64_t> d(c.size() + 1, 0);
  for (std::size_t j = 0; j < c.size(); ++j) d[j + 1] = d[j] + c[j];
  return d;
}

}  // namespace shardrt::test
