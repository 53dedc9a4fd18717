// CUDA kernels (gemm, elementwise, reductions, softmax, layer norm) against plain fp64 host reference loops, at
// odd sizes, broadcast and strided layouts, and empty shapes. Every case is skipped, with a warning, when no CUDA
// device is present.
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/softmax.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_context.h"
#include "runtime/dtype.h"
#include "runtime/half.h"

namespace cu = shardrt::kernels::cuda;
using shardrt::DType;

namespace {

using Vec = std::vector<double>;
using Shape = std::vector<int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const Shape kSizes = {0, 1, 7, 33, 1000, 4099};

cudaStream_t stream() { return shardrt::current_stream(0); }

// Device memory for a test, with uploads and downloads ordered on the kernels' stream.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n_ > 0) SHARDRT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    if (n_ > 0) {
      SHARDRT_CUDA_CHECK(cudaMemcpyAsync(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, stream()));
    }
    SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) {
      SHARDRT_CUDA_CHECK(cudaMemcpyAsync(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost, stream()));
    }
    SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return host;
  }

 private:
  std::size_t n_;
  T* ptr_ = nullptr;
};

Vec random_vec(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(static_cast<std::size_t>(n));
  for (double& e : v) e = dist(gen);
  return v;
}

// Uniform in [-hi, -lo] U [lo, hi]: keeps inputs away from kinks at 0.
Vec random_away_from_zero(int64_t n, double lo, double hi, uint64_t seed) {
  Vec v = random_vec(n, lo, hi, seed);
  for (std::size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
  return v;
}

// The values rounded to T and back: the exact inputs a kernel in T sees, for the fp64 reference.
template <typename T>
Vec rounded(const Vec& v) {
  Vec out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(static_cast<T>(v[i]));
  return out;
}

template <typename T>
std::vector<T> cast(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
Vec widen(const std::vector<T>& v) {
  return Vec(v.begin(), v.end());
}

template <typename T>
constexpr DType dtype_of_v = std::is_same_v<T, double> ? DType::f64 : DType::f32;

// Element i passes when both are NaN, both are equal (infinities included) or |got - want| <= atol + rtol |want|.
// Reports the count and the first failure.
void expect_close(const Vec& got, const Vec& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  std::ostringstream first;
  first.precision(17);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = (std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!ok && bad++ == 0) first << "index " << i << ": got " << g << ", want " << w;
  }
  INFO(bad << " of " << want.size() << " mismatches; first at " << first.str());
  CHECK(bad == 0);
}

// Relative tolerance of a kernel in T that rounds a few times, against the fp64 reference.
template <typename T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

// ---- GEMM ----

// C = alpha op(A) op(B) + beta C, row-major, in place; beta == 0 ignores C.
void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      }
      C[i * ldc + j] = alpha * acc + (beta == 0.0 ? 0.0 : beta * C[i * ldc + j]);
    }
  }
}

struct GemmDims {
  int64_t M, N, K;
};

// Leading dimensions padded past the minimum, so a kernel that assumes lda == K (or ldc == N) fails.
struct GemmLayout {
  int64_t lda, ldb, ldc, a_size, b_size, c_size;
  GemmLayout(const GemmDims& d, bool ta, bool tb)
      : lda((ta ? d.M : d.K) + 3),
        ldb((tb ? d.K : d.N) + 2),
        ldc(d.N + 1),
        a_size((ta ? d.K : d.M) * lda),
        b_size((tb ? d.N : d.K) * ldb),
        c_size(d.M * ldc) {}
};

// A and B hold values in [-1, 1], so |C| <= alpha K + |beta|; the absolute tolerance scales with that bound.
double gemm_atol(double rel, int64_t K) { return rel * static_cast<double>(K + 1); }

// ---- 16-bit helpers ----

uint16_t to_half_bits(DType t, double v) {
  const float f = static_cast<float>(v);
  return t == DType::bf16 ? shardrt::float_to_bf16(f).bits : shardrt::float_to_f16(f).bits;
}
double from_half_bits(DType t, uint16_t bits) {
  return t == DType::bf16 ? shardrt::bf16_to_float(shardrt::bf16{bits}) : shardrt::f16_to_float(shardrt::f16{bits});
}
std::vector<uint16_t> to_half(DType t, const Vec& v) {
  std::vector<uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_half_bits(t, v[i]);
  return out;
}
Vec from_half(DType t, const std::vector<uint16_t>& v) {
  Vec out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_half_bits(t, v[i]);
  return out;
}

// ---- strided operands for the broadcasting ops ----

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Offset of flat row-major index i of `shape` in an operand with `strides`.
int64_t strided_offset(int64_t i, const Shape& shape, const Shape& strides) {
  int64_t off = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

// A strided input: `data` holds every element the strides reach and `base` is where index 0 lies (past the start
// when a stride is negative).
struct Operand {
  Vec data;
  Shape strides;
  int64_t base = 0;
  double at(int64_t flat, const Shape& shape) const { return data[base + strided_offset(flat, shape, strides)]; }
};

Operand make_operand(const Shape& shape, const Shape& strides, double lo, double hi, uint64_t seed) {
  Operand op;
  op.strides = strides;
  int64_t span = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) continue;
    span += (shape[d] - 1) * std::abs(strides[d]);
    if (strides[d] < 0) op.base += (shape[d] - 1) * -strides[d];
  }
  op.data = random_vec(span, lo, hi, seed);
  return op;
}

struct BroadcastCase {
  const char* name;
  Shape shape, a_strides, b_strides;
};

// Contiguous (the fast path), scalar, row/column and middle broadcasts, transposed and reversed inputs, size-1
// dims, all 8 dims, 0-d and an empty output.
std::vector<BroadcastCase> broadcast_cases() {
  return {
      {"contiguous", {4099}, {1}, {1}},
      {"contiguous 2-d", {33, 7}, {7, 1}, {7, 1}},
      {"b scalar", {33, 7}, {7, 1}, {0, 0}},
      {"outer product", {33, 7}, {1, 0}, {0, 1}},
      {"a transposed", {7, 33}, {1, 7}, {33, 1}},
      {"reversed rows and columns", {5, 9}, {9, -1}, {-9, 1}},
      {"size-1 dims and middle broadcast", {3, 1, 5, 4}, {20, 20, 4, 1}, {4, 0, 0, 1}},
      {"8 dims", {2, 3, 1, 2, 3, 2, 1, 3}, {108, 36, 36, 18, 6, 3, 3, 1}, {0, 1, 0, 3, 0, 6, 0, 12}},
      {"0-d", {}, {}, {}},
      {"empty", {4, 0, 3}, {0, 3, 1}, {3, 3, 1}},
  };
}

double ref_binary(cu::BinaryOp op, double a, double b) {
  switch (op) {
    case cu::BinaryOp::add: return a + b;
    case cu::BinaryOp::sub: return a - b;
    case cu::BinaryOp::mul: return a * b;
    case cu::BinaryOp::div: return a / b;
    case cu::BinaryOp::pow: return std::pow(a, b);
    case cu::BinaryOp::maximum: return std::isnan(a) || std::isnan(b) ? kNaN : (a > b ? a : b);
    case cu::BinaryOp::minimum: return std::isnan(a) || std::isnan(b) ? kNaN : (a < b ? a : b);
  }
  return kNaN;
}

bool ref_compare(cu::CompareOp op, double a, double b) {
  switch (op) {
    case cu::CompareOp::eq: return a == b;
    case cu::CompareOp::ne: return a != b;
    case cu::CompareOp::lt: return a < b;
    case cu::CompareOp::le: return a <= b;
    case cu::CompareOp::gt: return a > b;
    case cu::CompareOp::ge: return a >= b;
  }
  return false;
}

// ---- unary references: value and derivative in fp64 ----

double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);

double ref_unary(cu::UnaryOp op, double x) {
  switch (op) {
    case cu::UnaryOp::neg: return -x;
    case cu::UnaryOp::exp: return std::exp(x);
    case cu::UnaryOp::log: return std::log(x);
    case cu::UnaryOp::sqrt: return std::sqrt(x);
    case cu::UnaryOp::rsqrt: return 1.0 / std::sqrt(x);
    case cu::UnaryOp::tanh: return std::tanh(x);
    case cu::UnaryOp::erf: return std::erf(x);
    case cu::UnaryOp::abs: return std::isnan(x) ? x : (x < 0 ? -x : x);
    case cu::UnaryOp::relu: return std::isnan(x) ? x : (x > 0 ? x : 0.0);
    case cu::UnaryOp::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case cu::UnaryOp::gelu_tanh: return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
    case cu::UnaryOp::silu: return x * ref_sigmoid(x);
    case cu::UnaryOp::sigmoid: return ref_sigmoid(x);
  }
  return kNaN;
}

double ref_derivative(cu::UnaryOp op, double x) {
  switch (op) {
    case cu::UnaryOp::neg: return -1.0;
    case cu::UnaryOp::exp: return std::exp(x);
    case cu::UnaryOp::log: return 1.0 / x;
    case cu::UnaryOp::sqrt: return 0.5 / std::sqrt(x);
    case cu::UnaryOp::rsqrt: return -0.5 / (x * std::sqrt(x));
    case cu::UnaryOp::tanh: return 1.0 - std::tanh(x) * std::tanh(x);
    case cu::UnaryOp::erf: return 2.0 / std::sqrt(M_PI) * std::exp(-x * x);
    case cu::UnaryOp::abs: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
    case cu::UnaryOp::relu: return x > 0 ? 1.0 : 0.0;
    case cu::UnaryOp::gelu_erf:
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    case cu::UnaryOp::gelu_tanh: {
      const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
      return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3 * 0.044715 * x * x);
    }
    case cu::UnaryOp::silu: {
      const double s = ref_sigmoid(x);
      return s * (1.0 + x * (1.0 - s));
    }
    case cu::UnaryOp::sigmoid: return ref_sigmoid(x) * (1.0 - ref_sigmoid(x));
  }
  return kNaN;
}

struct UnaryCase {
  cu::UnaryOp op;
  const char* name;
  bool positive_domain;  // log, sqrt, rsqrt
};

const std::vector<UnaryCase> kUnaryCases = {
    {cu::UnaryOp::neg, "neg", false},           {cu::UnaryOp::exp, "exp", false},
    {cu::UnaryOp::log, "log", true},            {cu::UnaryOp::sqrt, "sqrt", true},
    {cu::UnaryOp::rsqrt, "rsqrt", true},        {cu::UnaryOp::tanh, "tanh", false},
    {cu::UnaryOp::erf, "erf", false},           {cu::UnaryOp::abs, "abs", false},
    {cu::UnaryOp::relu, "relu", false},         {cu::UnaryOp::gelu_erf, "gelu_erf", false},
    {cu::UnaryOp::gelu_tanh, "gelu_tanh", false}, {cu::UnaryOp::silu, "silu", false},
    {cu::UnaryOp::sigmoid, "sigmoid", false},
};

// ---- (outer, n, inner) references ----

struct Slices {
  int64_t outer, n, inner;
  int64_t size() const { return outer * n * inner; }
  int64_t at(int64_t o, int64_t k, int64_t j) const { return (o * n + k) * inner + j; }
};

// Row (inner == 1) and column (inner > 1) layouts at odd sizes, empty reductions (n == 0) and empty outputs.
const std::vector<Slices> kSliceShapes = {{1, 1, 1},    {3, 7, 1},    {2, 33, 5}, {4, 1000, 1}, {1, 4099, 1},
                                          {2, 4099, 3}, {3, 0, 1},    {2, 0, 4},  {0, 7, 3},    {5, 7, 0}};

// Does v replace `best` in a scan over increasing k? The first index wins ties and the first NaN wins outright.
bool replaces(double v, double best, bool max) {
  return (max ? v > best : v < best) || (std::isnan(v) && !std::isnan(best));
}

double ref_logsumexp(const Vec& x, const Slices& s, int64_t o, int64_t j) {
  double shift = -kInf;
  for (int64_t k = 0; k < s.n; ++k) {
    if (replaces(x[s.at(o, k, j)], shift, true)) shift = x[s.at(o, k, j)];
  }
  if (!std::isfinite(shift)) return shift;
  double acc = 0.0;
  for (int64_t k = 0; k < s.n; ++k) acc += std::exp(x[s.at(o, k, j)] - shift);
  return shift + std::log(acc);
}

}  // namespace

// =================================================================================================================
// GEMM

TEMPLATE_TEST_CASE("cuda gemm: f32 and f64 against a host triple loop", "[cuda][kernels]", float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  uint64_t seed = 1;
  for (const GemmDims d : {GemmDims{1, 1, 1}, GemmDims{7, 33, 5}, GemmDims{33, 7, 64}, GemmDims{65, 63, 127}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (double beta : {0.0, -0.3}) {
          const GemmLayout l(d, ta, tb);
          const Vec A = rounded<T>(random_vec(l.a_size, -1, 1, ++seed));
          const Vec B = rounded<T>(random_vec(l.b_size, -1, 1, ++seed));
          // With beta == 0, C starts as NaN: BLAS semantics overwrite it without reading. The padding past N in
          // each row must come back untouched either way.
          const Vec C0 = beta == 0.0 ? Vec(l.c_size, kNaN) : rounded<T>(random_vec(l.c_size, -1, 1, ++seed));
          DeviceBuffer<T> a(cast<T>(A)), b(cast<T>(B)), c(cast<T>(C0));
          cu::gemm(dtype_of_v<T>, ta, tb, d.M, d.N, d.K, 0.7, a.get(), l.lda, b.get(), l.ldb, beta, c.get(), l.ldc,
                   stream());
          Vec want = C0;
          ref_gemm(ta, tb, d.M, d.N, d.K, 0.7, A.data(), l.lda, B.data(), l.ldb, beta, want.data(), l.ldc);
          INFO("M=" << d.M << " N=" << d.N << " K=" << d.K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
          expect_close(widen(c.download()), want, tol<T>(), gemm_atol(tol<T>(), d.K));
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda gemm_strided_batched: per-entry products, stride 0 shares an operand", "[cuda][kernels]",
                   float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  const GemmDims d{7, 33, 17};
  const int64_t batch = 3;
  uint64_t seed = 100;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (bool share_a : {true, false}) {
        const GemmLayout l(d, ta, tb);
        // One operand is shared (stride 0); the other and C have gaps between entries.
        const int64_t stride_a = share_a ? 0 : l.a_size + 5;
        const int64_t stride_b = share_a ? l.b_size + 4 : 0;
        const int64_t stride_c = l.c_size + 3;
        const Vec A = rounded<T>(random_vec(share_a ? l.a_size : batch * stride_a, -1, 1, ++seed));
        const Vec B = rounded<T>(random_vec(share_a ? batch * stride_b : l.b_size, -1, 1, ++seed));
        const Vec C0 = rounded<T>(random_vec(batch * stride_c, -1, 1, ++seed));
        DeviceBuffer<T> a(cast<T>(A)), b(cast<T>(B)), c(cast<T>(C0));
        cu::gemm_strided_batched(dtype_of_v<T>, ta, tb, d.M, d.N, d.K, -1.25, a.get(), l.lda, b.get(), l.ldb, 0.5,
                                 c.get(), l.ldc, batch, stride_a, stride_b, stride_c, stream());
        Vec want = C0;
        for (int64_t i = 0; i < batch; ++i) {
          ref_gemm(ta, tb, d.M, d.N, d.K, -1.25, A.data() + i * stride_a, l.lda, B.data() + i * stride_b, l.ldb, 0.5,
                   want.data() + i * stride_c, l.ldc);
        }
        INFO("ta=" << ta << " tb=" << tb << " share_a=" << share_a);
        expect_close(widen(c.download()), want, tol<T>(), gemm_atol(tol<T>(), d.K) * 2);
      }
    }
  }
}

TEST_CASE("cuda gemm: bf16 and f16 read 16-bit matrices and accumulate in f32", "[cuda][kernels]") {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  const GemmDims d{33, 17, 64};
  uint64_t seed = 200;
  for (DType t : {DType::bf16, DType::f16}) {
    // Half an ulp of the output format, relative, plus f32 accumulation error.
    const double rel = t == DType::bf16 ? 8e-3 : 1e-3;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const GemmLayout l(d, ta, tb);
        const int64_t batch = ta == tb ? 2 : 1;  // two of the layouts also run batched
        const Vec A = from_half(t, to_half(t, random_vec(l.a_size, -1, 1, ++seed)));
        const Vec B = from_half(t, to_half(t, random_vec(batch * l.b_size, -1, 1, ++seed)));
        const Vec C0 = from_half(t, to_half(t, random_vec(batch * l.c_size, -1, 1, ++seed)));
        DeviceBuffer<uint16_t> a(to_half(t, A)), b(to_half(t, B)), c(to_half(t, C0));
        if (batch == 1) {
          cu::gemm(t, ta, tb, d.M, d.N, d.K, 0.5, a.get(), l.lda, b.get(), l.ldb, 0.25, c.get(), l.ldc, stream());
        } else {
          cu::gemm_strided_batched(t, ta, tb, d.M, d.N, d.K, 0.5, a.get(), l.lda, b.get(), l.ldb, 0.25, c.get(),
                                   l.ldc, batch, 0, l.b_size, l.c_size, stream());
        }
        Vec want = C0;
        for (int64_t i = 0; i < batch; ++i) {
          ref_gemm(ta, tb, d.M, d.N, d.K, 0.5, A.data(), l.lda, B.data() + i * l.b_size, l.ldb, 0.25,
                   want.data() + i * l.c_size, l.ldc);
        }
        INFO(shardrt::dtype_name(t) << " ta=" << ta << " tb=" << tb << " batch=" << batch);
        expect_close(from_half(t, c.download()), want, rel, rel);
      }
    }
  }
}

TEST_CASE("cuda gemm: empty products scale C by beta, empty outputs touch nothing", "[cuda][kernels]") {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  const int64_t M = 3, N = 4, ldc = 6;
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    for (double beta : {0.0, 2.0, 1.0}) {
      for (int64_t batch : {1, 2}) {
        INFO(shardrt::dtype_name(t) << " beta=" << beta << " batch=" << batch);
        const int64_t stride_c = M * ldc + 1;
        const int64_t size = batch * stride_c;
        Vec c0 = random_vec(size, -2, 2, 7);
        if (beta == 0.0) {  // beta == 0 must drop NaN in C; the padding keeps its NaN
          for (double& v : c0) v = kNaN;
        }
        Vec want = c0;
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              double& w = want[b * stride_c + i * ldc + j];
              w = beta == 0.0 ? 0.0 : beta * w;
            }
          }
        }
        // A and B are never read when K == 0, so null pointers must do.
        auto run = [&](void* c) {
          if (batch == 1) {
            cu::gemm(t, false, false, M, N, 0, 1.0, nullptr, 1, nullptr, N, beta, c, ldc, stream());
          } else {
            cu::gemm_strided_batched(t, true, false, M, N, 0, 1.0, nullptr, M, nullptr, N, beta, c, ldc, batch, 0, 0,
                                     stride_c, stream());
          }
        };
        if (t == DType::bf16) {
          const Vec c_in = from_half(t, to_half(t, c0));
          want = c_in;
          for (int64_t b = 0; b < batch; ++b) {
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < N; ++j) {
                double& w = want[b * stride_c + i * ldc + j];
                w = beta == 0.0 ? 0.0 : beta * w;  // doubling is exact in bf16
              }
            }
          }
          DeviceBuffer<uint16_t> c(to_half(t, c_in));
          run(c.get());
          expect_close(from_half(t, c.download()), want, 0, 0);
        } else if (t == DType::f32) {
          DeviceBuffer<float> c(cast<float>(c0));
          run(c.get());
          expect_close(widen(c.download()), rounded<float>(want), 0, 0);
        } else {
          DeviceBuffer<double> c(c0);
          run(c.get());
          expect_close(c.download(), want, 0, 0);
        }
      }
    }
  }
  // M == 0 or N == 0: nothing is written, and nothing is read.
  DeviceBuffer<float> sentinel(cast<float>(Vec{1, 2, 3}));
  cu::gemm(DType::f32, false, false, 3, 0, 5, 1.0, nullptr, 5, nullptr, 1, 0.0, sentinel.get(), 1, stream());
  cu::gemm(DType::f32, false, false, 0, 3, 5, 1.0, nullptr, 5, nullptr, 3, 0.0, sentinel.get(), 3, stream());
  cu::gemm_strided_batched(DType::f32, false, false, 1, 3, 5, 1.0, nullptr, 5, nullptr, 3, 0.0, sentinel.get(), 3, 0,
                           0, 0, 0, stream());
  expect_close(widen(sentinel.download()), Vec{1, 2, 3}, 0, 0);
  CHECK_THROWS_AS(cu::gemm(DType::i32, false, false, 1, 1, 1, 1.0, nullptr, 1, nullptr, 1, 0.0, sentinel.get(), 1,
                           stream()),
                  shardrt::DTypeError);
}

// =================================================================================================================
// Elementwise

TEMPLATE_TEST_CASE("cuda unary maps and their backward against fp64 formulas", "[cuda][kernels]", float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  // Derivatives taken from the output lose relative precision where f' is small (1 - tanh^2 near saturation).
  const double grad_tol = std::is_same_v<T, double> ? 1e-10 : 1e-4;
  uint64_t seed = 300;
  for (const UnaryCase& c : kUnaryCases) {
    for (int64_t n : kSizes) {
      INFO(c.name << " n=" << n);
      const Vec x = rounded<T>(c.positive_domain ? random_vec(n, 0.1, 4.0, ++seed)
                                                 : random_away_from_zero(n, 0.05, 4.0, ++seed));
      const Vec gy = rounded<T>(random_vec(n, -1, 1, ++seed));
      DeviceBuffer<T> dx(cast<T>(x)), dy(n), dgy(cast<T>(gy)), dgx(n);
      cu::unary<T>(c.op, n, dx.get(), dy.get(), stream());
      cu::unary_backward<T>(c.op, n, dx.get(), dy.get(), dgy.get(), dgx.get(), stream());
      Vec want_y(n), want_gx(n);
      for (int64_t i = 0; i < n; ++i) {
        want_y[i] = ref_unary(c.op, x[i]);
        want_gx[i] = gy[i] * ref_derivative(c.op, x[i]);
      }
      expect_close(widen(dy.download()), want_y, tol<T>(), tol<T>() * 0.1);
      expect_close(widen(dgx.download()), want_gx, grad_tol, grad_tol * 0.1);
      // In place: y aliases x.
      cu::unary<T>(c.op, n, dx.get(), dx.get(), stream());
      expect_close(widen(dx.download()), want_y, tol<T>(), tol<T>() * 0.1);
    }
  }
  // NaN propagates through relu and abs; the kinks at 0 have derivative 0.
  const Vec x = {kNaN, 0.0, -0.0, 2.0, -3.0};
  const Vec gy = {1, 1, 1, 1, 1};
  for (cu::UnaryOp op : {cu::UnaryOp::relu, cu::UnaryOp::abs}) {
    DeviceBuffer<T> dx(cast<T>(x)), dy(x.size()), dgy(cast<T>(gy)), dgx(x.size());
    cu::unary<T>(op, 5, dx.get(), dy.get(), stream());
    cu::unary_backward<T>(op, 5, dx.get(), dy.get(), dgy.get(), dgx.get(), stream());
    Vec want_y(5), want_gx(5);
    for (int i = 0; i < 5; ++i) want_y[i] = ref_unary(op, x[i]);
    want_gx = op == cu::UnaryOp::relu ? Vec{0, 0, 0, 1, 0} : Vec{0, 0, 0, 1, -1};
    expect_close(widen(dy.download()), want_y, 0, 0);
    expect_close(widen(dgx.download()), want_gx, 0, 0);
  }
}

TEMPLATE_TEST_CASE("cuda pow_scalar, clamp, affine, fill and axpy with their backward", "[cuda][kernels]", float,
                   double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  uint64_t seed = 400;
  for (int64_t n : kSizes) {
    INFO("n=" << n);
    Vec x = rounded<T>(random_vec(n, -2, 2, ++seed));
    const Vec gy = rounded<T>(random_vec(n, -1, 1, ++seed));
    if (n >= 7) {  // exact bounds, a zero and a NaN, for clamp's inclusive grad and NaN rule
      x[1] = -0.5;
      x[2] = 0.75;
      x[3] = 0.0;
      x[4] = kNaN;
    }
    const Vec x_pos = rounded<T>(random_vec(n, 0.1, 3, ++seed));
    DeviceBuffer<T> dx(cast<T>(x)), dpos(cast<T>(x_pos)), dgy(cast<T>(gy)), dy(n), dgx(n);

    for (double p : {2.0, 0.5, 3.0, 0.0}) {
      INFO("p=" << p);
      cu::pow_scalar<T>(n, dpos.get(), static_cast<T>(p), dy.get(), stream());
      cu::pow_scalar_backward<T>(n, dpos.get(), static_cast<T>(p), dgy.get(), dgx.get(), stream());
      Vec want_y(n), want_gx(n);
      for (int64_t i = 0; i < n; ++i) {
        want_y[i] = std::pow(x_pos[i], p);
        want_gx[i] = p == 0.0 ? 0.0 : gy[i] * p * std::pow(x_pos[i], p - 1);
      }
      expect_close(widen(dy.download()), want_y, tol<T>(), 0);
      expect_close(widen(dgx.download()), want_gx, tol<T>(), tol<T>() * 0.1);
    }
    // p == 0 gives exactly zero grads even at x == 0 (and with x holding NaN).
    cu::pow_scalar_backward<T>(n, dx.get(), T(0), dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), Vec(n, 0.0), 0, 0);

    const struct {
      double lo, hi;
    } bounds[] = {{-0.5, 0.75}, {-kInf, 0.25}, {0.5, -0.5}};  // exact in float, like x's special values
    for (const auto& bd : bounds) {
      INFO("clamp [" << bd.lo << ", " << bd.hi << "]");
      cu::clamp<T>(n, dx.get(), static_cast<T>(bd.lo), static_cast<T>(bd.hi), dy.get(), stream());
      cu::clamp_backward<T>(n, dx.get(), static_cast<T>(bd.lo), static_cast<T>(bd.hi), dgy.get(), dgx.get(), stream());
      Vec want_y(n), want_gx(n);
      for (int64_t i = 0; i < n; ++i) {
        want_y[i] = std::isnan(x[i]) ? kNaN : (bd.lo > bd.hi ? bd.hi : std::min(std::max(x[i], bd.lo), bd.hi));
        want_gx[i] = (bd.lo <= x[i] && x[i] <= bd.hi) ? gy[i] : 0.0;
      }
      expect_close(widen(dy.download()), want_y, 0, 0);
      expect_close(widen(dgx.download()), want_gx, 0, 0);
    }

    cu::affine<T>(n, dx.get(), T(1.5), T(-2), dy.get(), stream());
    Vec want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = 1.5 * x[i] - 2;
    expect_close(widen(dy.download()), want, tol<T>(), tol<T>());

    cu::fill<T>(n, T(3.25), dy.get(), stream());
    expect_close(widen(dy.download()), Vec(n, 3.25), 0, 0);
    cu::axpy<T>(n, T(0.5), dgy.get(), dy.get(), stream());
    for (int64_t i = 0; i < n; ++i) want[i] = 3.25 + 0.5 * gy[i];
    expect_close(widen(dy.download()), want, tol<T>(), 0);
  }
}

TEMPLATE_TEST_CASE("cuda broadcasting binary, compare and where over strided inputs", "[cuda][kernels]", float,
                   double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  const cu::BinaryOp binary_ops[] = {cu::BinaryOp::add, cu::BinaryOp::sub,     cu::BinaryOp::mul,
                                     cu::BinaryOp::div, cu::BinaryOp::pow,     cu::BinaryOp::maximum,
                                     cu::BinaryOp::minimum};
  const cu::CompareOp compare_ops[] = {cu::CompareOp::eq, cu::CompareOp::ne, cu::CompareOp::lt,
                                       cu::CompareOp::le, cu::CompareOp::gt, cu::CompareOp::ge};
  uint64_t seed = 500;
  for (const BroadcastCase& bc : broadcast_cases()) {
    INFO(bc.name);
    const int ndim = static_cast<int>(bc.shape.size());
    const int64_t n = numel(bc.shape);
    // a > 0 keeps pow real; b stays away from 0 for div. Values on a 1/4 grid make equal pairs common for the
    // comparisons, and a NaN on each side checks NaN propagation and the NaN comparison rules.
    Operand a = make_operand(bc.shape, bc.a_strides, 0.25, 2, ++seed);
    Operand b = make_operand(bc.shape, bc.b_strides, 0.25, 2, ++seed);
    for (double& v : a.data) v = std::round(v * 4) / 4;
    for (std::size_t i = 0; i < b.data.size(); ++i) b.data[i] = (i % 3 == 0 ? -1 : 1) * std::round(b.data[i] * 4) / 4;
    if (a.data.size() > 3) a.data[3] = kNaN;
    if (b.data.size() > 5) b.data[5] = kNaN;
    Operand cond = a;  // same layout as a, its own values
    for (std::size_t i = 0; i < cond.data.size(); ++i) cond.data[i] = (i * 7) % 3 == 0 ? 1 : 0;
    std::vector<uint8_t> cond_bytes(cond.data.begin(), cond.data.end());

    DeviceBuffer<T> da(cast<T>(a.data)), db(cast<T>(b.data)), dout(n);
    DeviceBuffer<uint8_t> dcond(cond_bytes), dflags(n);
    const T* pa = da.get() + a.base;
    const T* pb = db.get() + b.base;

    for (cu::BinaryOp op : binary_ops) {
      INFO("binary op " << static_cast<int>(op));
      cu::binary<T>(op, ndim, bc.shape.data(), pa, bc.a_strides.data(), pb, bc.b_strides.data(), dout.get(),
                    stream());
      Vec want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = ref_binary(op, a.at(i, bc.shape), b.at(i, bc.shape));
      expect_close(widen(dout.download()), want, tol<T>() * 0.1, 0);
    }
    for (cu::CompareOp op : compare_ops) {
      INFO("compare op " << static_cast<int>(op));
      cu::compare<T>(op, ndim, bc.shape.data(), pa, bc.a_strides.data(), pb, bc.b_strides.data(), dflags.get(),
                     stream());
      Vec want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = ref_compare(op, a.at(i, bc.shape), b.at(i, bc.shape)) ? 1 : 0;
      expect_close(widen(dflags.download()), want, 0, 0);
    }
    cu::where<T>(ndim, bc.shape.data(), dcond.get() + cond.base, cond.strides.data(), pa, bc.a_strides.data(), pb,
                 bc.b_strides.data(), dout.get(), stream());
    Vec want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = cond.at(i, bc.shape) != 0 ? a.at(i, bc.shape) : b.at(i, bc.shape);
    expect_close(widen(dout.download()), want, 0, 0);
  }
}

// =================================================================================================================
// Reductions

TEMPLATE_TEST_CASE("cuda reductions: sum, mean, max/min with index, logsumexp", "[cuda][kernels]", float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  uint64_t seed = 600;
  for (const Slices& s : kSliceShapes) {
    INFO("outer=" << s.outer << " n=" << s.n << " inner=" << s.inner);
    // Values on a 1/4 grid: ties are common, so the first-index rule is exercised.
    Vec x = random_vec(s.size(), -2, 2, ++seed);
    for (double& v : x) v = std::round(v * 4) / 4;
    const int64_t outs = s.outer * s.inner;
    DeviceBuffer<T> dx(cast<T>(x)), dy(outs);
    DeviceBuffer<int64_t> didx(outs);

    Vec sum(outs, 0.0), abs_sum(outs, 0.0);
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < s.inner; ++j) {
        for (int64_t k = 0; k < s.n; ++k) {
          sum[o * s.inner + j] += x[s.at(o, k, j)];
          abs_sum[o * s.inner + j] += std::abs(x[s.at(o, k, j)]);
        }
      }
    }
    // The reference sums in another order; the difference is bounded by a few ulps of the absolute sum.
    const double atol = 1e-14 * (s.n + 1) * 2;
    cu::reduce_sum<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), stream());
    expect_close(widen(dy.download()), sum, tol<T>() * 0.1, atol);
    cu::reduce_mean<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), stream());
    Vec mean(outs);
    for (int64_t i = 0; i < outs; ++i) mean[i] = s.n == 0 ? kNaN : sum[i] / static_cast<double>(s.n);
    expect_close(widen(dy.download()), mean, tol<T>() * 0.1, atol);

    if (s.n > 0) {
      for (bool is_max : {true, false}) {
        INFO((is_max ? "max" : "min"));
        Vec want_y(outs);
        std::vector<int64_t> want_idx(outs);
        for (int64_t o = 0; o < s.outer; ++o) {
          for (int64_t j = 0; j < s.inner; ++j) {
            int64_t arg = 0;
            for (int64_t k = 1; k < s.n; ++k) {
              if (replaces(x[s.at(o, k, j)], x[s.at(o, arg, j)], is_max)) arg = k;
            }
            want_y[o * s.inner + j] = x[s.at(o, arg, j)];
            want_idx[o * s.inner + j] = arg;
          }
        }
        if (is_max) {
          cu::reduce_max<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), didx.get(), stream());
        } else {
          cu::reduce_min<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), didx.get(), stream());
        }
        expect_close(widen(dy.download()), want_y, 0, 0);
        CHECK(didx.download() == want_idx);
        if (is_max) {
          cu::reduce_argmax<T>(s.outer, s.n, s.inner, dx.get(), didx.get(), stream());
          CHECK(didx.download() == want_idx);
        }
      }
    }

    Vec lse(outs);
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < s.inner; ++j) lse[o * s.inner + j] = ref_logsumexp(x, s, o, j);
    }
    cu::reduce_logsumexp<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), stream());
    expect_close(widen(dy.download()), lse, tol<T>() * 0.1, tol<T>() * 0.1);
  }
}

TEMPLATE_TEST_CASE("cuda reductions: NaN, infinities and the first NaN's index", "[cuda][kernels]", float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  // Four slices of length 5: all -inf; holding +inf; two NaNs (the first at k = 1); plain values with a tie.
  const std::vector<Vec> slices = {{-kInf, -kInf, -kInf, -kInf, -kInf},
                                   {1, kInf, 2, -kInf, 3},
                                   {1, kNaN, 5, kNaN, -1},
                                   {0.5, 2, -1, 2, 0}};
  const Vec want_max = {-kInf, kInf, kNaN, 2};
  const std::vector<int64_t> want_max_idx = {0, 1, 1, 1};
  const Vec want_min = {-kInf, -kInf, kNaN, -1};
  const std::vector<int64_t> want_min_idx = {0, 3, 1, 2};
  const Vec want_lse = {-kInf, kInf, kNaN, std::log(std::exp(0.5) + 2 * std::exp(2) + std::exp(-1) + 1)};
  for (int64_t inner : {1, 3}) {
    INFO("inner=" << inner);
    // Layout (outer = 4, n = 5, inner): every column j of slice o holds the same values.
    const Slices s{4, 5, inner};
    Vec x(s.size());
    for (int64_t o = 0; o < 4; ++o) {
      for (int64_t k = 0; k < 5; ++k) {
        for (int64_t j = 0; j < inner; ++j) x[s.at(o, k, j)] = slices[o][k];
      }
    }
    auto per_column = [&](const Vec& v) {
      Vec out;
      for (double e : v) out.insert(out.end(), inner, e);
      return out;
    };
    auto per_column_idx = [&](const std::vector<int64_t>& v) {
      std::vector<int64_t> out;
      for (int64_t e : v) out.insert(out.end(), inner, e);
      return out;
    };
    DeviceBuffer<T> dx(cast<T>(x)), dy(4 * inner), dgy(cast<T>(Vec(4 * inner, 1.0))), dgx(s.size());
    DeviceBuffer<int64_t> didx(4 * inner);
    cu::reduce_max<T>(4, 5, inner, dx.get(), dy.get(), didx.get(), stream());
    expect_close(widen(dy.download()), per_column(want_max), 0, 0);
    CHECK(didx.download() == per_column_idx(want_max_idx));
    cu::reduce_min<T>(4, 5, inner, dx.get(), dy.get(), didx.get(), stream());
    expect_close(widen(dy.download()), per_column(want_min), 0, 0);
    CHECK(didx.download() == per_column_idx(want_min_idx));
    cu::reduce_logsumexp<T>(4, 5, inner, dx.get(), dy.get(), stream());
    expect_close(widen(dy.download()), per_column(want_lse), tol<T>(), 0);
    // The backward of a fully masked (all -inf) slice is 0, not NaN.
    cu::reduce_logsumexp_backward<T>(4, 5, inner, dx.get(), dy.get(), dgy.get(), dgx.get(), stream());
    const Vec gx = widen(dgx.download());
    for (int64_t k = 0; k < 5; ++k) {
      for (int64_t j = 0; j < inner; ++j) CHECK(gx[s.at(0, k, j)] == 0.0);
    }
  }
}

TEMPLATE_TEST_CASE("cuda reduction backward helpers", "[cuda][kernels]", float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  uint64_t seed = 700;
  for (const Slices& s : kSliceShapes) {
    INFO("outer=" << s.outer << " n=" << s.n << " inner=" << s.inner);
    const int64_t outs = s.outer * s.inner;
    const Vec x = rounded<T>(random_vec(s.size(), -3, 3, ++seed));
    const Vec gy = rounded<T>(random_vec(outs, -1, 1, ++seed));
    std::vector<int64_t> idx(outs);
    std::mt19937_64 gen(++seed);
    for (int64_t& i : idx) i = s.n > 0 ? static_cast<int64_t>(gen() % static_cast<uint64_t>(s.n)) : 0;
    Vec lse(outs);
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < s.inner; ++j) lse[o * s.inner + j] = ref_logsumexp(x, s, o, j);
    }
    lse = rounded<T>(lse);
    DeviceBuffer<T> dx(cast<T>(x)), dgy(cast<T>(gy)), dlse(cast<T>(lse)), dgx(s.size());
    DeviceBuffer<int64_t> didx(idx);

    Vec want_sum(s.size()), want_mean(s.size()), want_index(s.size()), want_lse(s.size());
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t k = 0; k < s.n; ++k) {
        for (int64_t j = 0; j < s.inner; ++j) {
          const int64_t out = o * s.inner + j;
          want_sum[s.at(o, k, j)] = gy[out];
          want_mean[s.at(o, k, j)] = gy[out] / static_cast<double>(s.n);
          want_index[s.at(o, k, j)] = idx[out] == k ? gy[out] : 0.0;
          want_lse[s.at(o, k, j)] = gy[out] * std::exp(x[s.at(o, k, j)] - lse[out]);
        }
      }
    }
    cu::reduce_sum_backward<T>(s.outer, s.n, s.inner, dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), want_sum, 0, 0);
    cu::reduce_mean_backward<T>(s.outer, s.n, s.inner, dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), want_mean, tol<T>() * 0.1, 0);
    cu::reduce_index_backward<T>(s.outer, s.n, s.inner, didx.get(), dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), want_index, 0, 0);
    cu::reduce_logsumexp_backward<T>(s.outer, s.n, s.inner, dx.get(), dlse.get(), dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), want_lse, tol<T>(), tol<T>() * 0.1);
  }
}

// =================================================================================================================
// Softmax

TEMPLATE_TEST_CASE("cuda softmax and log_softmax, forward and backward", "[cuda][kernels]", float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  uint64_t seed = 800;
  for (const Slices& s : kSliceShapes) {
    INFO("outer=" << s.outer << " n=" << s.n << " inner=" << s.inner);
    const Vec x = rounded<T>(random_vec(s.size(), -6, 6, ++seed));
    const Vec gy = rounded<T>(random_vec(s.size(), -1, 1, ++seed));
    Vec sm(s.size()), lsm(s.size());
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < s.inner; ++j) {
        const double lse = ref_logsumexp(x, s, o, j);
        for (int64_t k = 0; k < s.n; ++k) {
          lsm[s.at(o, k, j)] = x[s.at(o, k, j)] - lse;
          sm[s.at(o, k, j)] = std::exp(lsm[s.at(o, k, j)]);
        }
      }
    }
    DeviceBuffer<T> dx(cast<T>(x)), dy(s.size()), dgy(cast<T>(gy)), dgx(s.size());
    cu::softmax<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), stream());
    expect_close(widen(dy.download()), sm, tol<T>(), 0);
    cu::log_softmax<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), stream());
    expect_close(widen(dy.download()), lsm, tol<T>(), tol<T>());

    // Backward from the reference outputs rounded to T, as a caller passes the saved forward output.
    const Vec y = rounded<T>(sm), log_y = rounded<T>(lsm);
    Vec want_sm(s.size()), want_lsm(s.size());
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t j = 0; j < s.inner; ++j) {
        double dot = 0.0, sum = 0.0;
        for (int64_t k = 0; k < s.n; ++k) {
          dot += gy[s.at(o, k, j)] * y[s.at(o, k, j)];
          sum += gy[s.at(o, k, j)];
        }
        for (int64_t k = 0; k < s.n; ++k) {
          const int64_t i = s.at(o, k, j);
          want_sm[i] = y[i] * (gy[i] - dot);
          want_lsm[i] = gy[i] - std::exp(log_y[i]) * sum;
        }
      }
    }
    DeviceBuffer<T> dsm(cast<T>(y)), dlsm(cast<T>(log_y));
    cu::softmax_backward<T>(s.outer, s.n, s.inner, dsm.get(), dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), want_sm, tol<T>(), tol<T>() * 0.1);
    cu::log_softmax_backward<T>(s.outer, s.n, s.inner, dlsm.get(), dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), want_lsm, tol<T>(), tol<T>() * 0.1);

    // In place: y aliases x, gx aliases gy.
    cu::softmax<T>(s.outer, s.n, s.inner, dx.get(), dx.get(), stream());
    expect_close(widen(dx.download()), sm, tol<T>(), 0);
    cu::log_softmax_backward<T>(s.outer, s.n, s.inner, dlsm.get(), dgy.get(), dgy.get(), stream());
    expect_close(widen(dgy.download()), want_lsm, tol<T>(), tol<T>() * 0.1);
  }
  // A slice that is entirely -inf gives NaN (as in PyTorch); its neighbours are unaffected.
  for (int64_t inner : {1, 2}) {
    const Slices s{2, 3, inner};
    Vec x(s.size(), -kInf);
    for (int64_t k = 0; k < 3; ++k) {
      for (int64_t j = 0; j < inner; ++j) x[s.at(1, k, j)] = static_cast<double>(k);
    }
    DeviceBuffer<T> dx(cast<T>(x)), dy(s.size());
    cu::softmax<T>(2, 3, inner, dx.get(), dy.get(), stream());
    const Vec y = widen(dy.download());
    const double total = 1 + std::exp(1.0) + std::exp(2.0);
    for (int64_t k = 0; k < 3; ++k) {
      for (int64_t j = 0; j < inner; ++j) {
        CHECK(std::isnan(y[s.at(0, k, j)]));
        CHECK(y[s.at(1, k, j)] == Approx(std::exp(static_cast<double>(k)) / total).epsilon(1e-6));
      }
    }
  }
}

// =================================================================================================================
// Layer norm

TEMPLATE_TEST_CASE("cuda layernorm forward and backward against fp64 formulas", "[cuda][kernels]", float, double) {
  if (shardrt::cuda_device_count() == 0) {
    WARN("skipped: no CUDA device");
    return;
  }
  using T = TestType;
  struct Case {
    int64_t rows, D;
    bool weight, bias;
    double offset;  // data far from zero tests the two-pass statistics
  };
  // (9000, 7) cuts the rows into the maximum number of param-grad chunks, the last ones empty.
  const Case cases[] = {{1, 1, true, true, 0},      {7, 33, true, true, 0},  {33, 1000, true, false, 1e4},
                        {5, 4099, false, true, 0},  {9000, 7, true, true, 0}, {3, 8, false, false, 0},
                        {0, 8, true, true, 0}};
  uint64_t seed = 900;
  for (const Case& c : cases) {
    INFO("rows=" << c.rows << " D=" << c.D << " weight=" << c.weight << " bias=" << c.bias);
    const int64_t size = c.rows * c.D;
    Vec x = random_vec(size, -2, 2, ++seed);
    for (double& v : x) v += c.offset + 0.5;
    x = rounded<T>(x);
    const Vec w = rounded<T>(random_vec(c.D, 0.5, 1.5, ++seed));
    const Vec b = rounded<T>(random_vec(c.D, -1, 1, ++seed));
    const Vec gy = rounded<T>(random_vec(size, -1, 1, ++seed));
    const double eps = 1e-5;

    Vec mean(c.rows), rstd(c.rows), y(size);
    for (int64_t r = 0; r < c.rows; ++r) {
      double s = 0.0;
      for (int64_t j = 0; j < c.D; ++j) s += x[r * c.D + j];
      mean[r] = s / static_cast<double>(c.D);
      double sq = 0.0;
      for (int64_t j = 0; j < c.D; ++j) sq += (x[r * c.D + j] - mean[r]) * (x[r * c.D + j] - mean[r]);
      rstd[r] = 1.0 / std::sqrt(sq / static_cast<double>(c.D) + eps);
      for (int64_t j = 0; j < c.D; ++j) {
        const double xhat = (x[r * c.D + j] - mean[r]) * rstd[r];
        y[r * c.D + j] = xhat * (c.weight ? w[j] : 1.0) + (c.bias ? b[j] : 0.0);
      }
    }
    DeviceBuffer<T> dx(cast<T>(x)), dw(cast<T>(w)), db(cast<T>(b)), dy(size), dmean(c.rows), drstd(c.rows);
    const T* wp = c.weight ? dw.get() : nullptr;
    cu::layernorm<T>(c.rows, c.D, dx.get(), wp, c.bias ? db.get() : nullptr, static_cast<T>(eps), dy.get(),
                     dmean.get(), drstd.get(), stream());
    // At an offset c the deviations x - mean carry the rounding of c (an ulp of 1e4 is 2e-12 in fp64), and the
    // mean of a row near zero is a cancellation: both need an absolute floor.
    expect_close(widen(dy.download()), y, tol<T>(), tol<T>() + 1e-14 * c.offset);
    expect_close(widen(dmean.download()), mean, tol<T>() * 0.1, tol<T>() * 0.1);
    expect_close(widen(drstd.download()), rstd, tol<T>(), 0);

    // Backward from the statistics rounded to T (what the forward saves). A large offset would cost the float
    // backward its precision (it works in T, as the CPU kernel does), so it is checked at offset 0 only.
    if (c.offset != 0.0) continue;
    const Vec mu = rounded<T>(mean), rs = rounded<T>(rstd);
    Vec want_gx(size), want_gw(c.D, 0.25), want_gb(c.D, -0.5);  // the param grads accumulate onto these
    for (int64_t r = 0; r < c.rows; ++r) {
      double mean_g = 0.0, mean_g_xhat = 0.0;
      for (int64_t j = 0; j < c.D; ++j) {
        const int64_t i = r * c.D + j;
        const double xhat = (x[i] - mu[r]) * rs[r];
        const double g = gy[i] * (c.weight ? w[j] : 1.0);
        mean_g += g / static_cast<double>(c.D);
        mean_g_xhat += g * xhat / static_cast<double>(c.D);
        want_gw[j] += gy[i] * xhat;
        want_gb[j] += gy[i];
      }
      for (int64_t j = 0; j < c.D; ++j) {
        const int64_t i = r * c.D + j;
        const double xhat = (x[i] - mu[r]) * rs[r];
        want_gx[i] = rs[r] * (gy[i] * (c.weight ? w[j] : 1.0) - mean_g - xhat * mean_g_xhat);
      }
    }
    DeviceBuffer<T> dmu(cast<T>(mu)), drs(cast<T>(rs)), dgy(cast<T>(gy)), dgx(size);
    DeviceBuffer<T> dgw(cast<T>(Vec(c.D, 0.25))), dgb(cast<T>(Vec(c.D, -0.5)));
    cu::layernorm_backward<T>(c.rows, c.D, dx.get(), wp, dmu.get(), drs.get(), dgy.get(), dgx.get(), dgw.get(),
                              dgb.get(), stream());
    const double grad_tol = std::is_same_v<T, double> ? 1e-10 : 1e-4;
    expect_close(widen(dgx.download()), want_gx, grad_tol, grad_tol * 0.1);
    const double sum_atol = grad_tol * 0.01 * static_cast<double>(c.rows + 1);
    const std::vector<T> gw_first = dgw.download();
    expect_close(widen(gw_first), want_gw, grad_tol, sum_atol);
    expect_close(widen(dgb.download()), want_gb, grad_tol, sum_atol);

    // Param grads are reproducible to the bit, and gx and either param grad may be skipped.
    dgw.upload(cast<T>(Vec(c.D, 0.25)));
    cu::layernorm_backward<T>(c.rows, c.D, dx.get(), wp, dmu.get(), drs.get(), dgy.get(), nullptr, dgw.get(), nullptr,
                              stream());
    CHECK(dgw.download() == gw_first);
    dgb.upload(cast<T>(Vec(c.D, -0.5)));
    cu::layernorm_backward<T>(c.rows, c.D, dx.get(), wp, dmu.get(), drs.get(), dgy.get(), nullptr, nullptr, dgb.get(),
                              stream());
    expect_close(widen(dgb.download()), want_gb, grad_tol, sum_atol);
  }
}
