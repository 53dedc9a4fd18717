// The fp64 reference loops of reference.h. Each is written from the op's definition, by a route different from
// the kernel's (no blocking, no im2col, no online softmax), so a shared mistake is unlikely.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace shardrt::test {

namespace cpu = kernels::cpu;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

int64_t prod(const int64_t* dims, int n) {
  int64_t p = 1;
  for (int d = 0; d < n; ++d) p *= dims[d];
  return p;
}

// PyTorch's source coordinate for a linear mode, straight from its definition.
double linear_source(bool align_corners, int64_t in, int64_t out, int64_t dst) {
  if (align_corners) return out > 1 ? double(dst) * double(in - 1) / double(out - 1) : 0.0;
  const double src = (double(dst) + 0.5) * double(in) / double(out) - 0.5;
  return src < 0 ? 0.0 : src;
}

// Where padded coordinate s reads from, by repeated mirroring / wrapping (a different route from the kernel's).
int64_t pad_source(cpu::PadMode mode, int64_t s, int64_t n) {
  switch (mode) {
    case cpu::PadMode::constant:
      return s >= 0 && s < n ? s : -1;
    case cpu::PadMode::replicate:
      return s < 0 ? 0 : (s >= n ? n - 1 : s);
    case cpu::PadMode::circular:
      while (s < 0) s += n;
      return s % n;
    case cpu::PadMode::reflect:
      while (s < 0 || s >= n) s = s < 0 ? -s : 2 * (n - 1) - s;
      return s;
  }
  return -1;
}

}  // namespace

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

double ref_unary(cpu::UnaryOp op, double x) {
  switch (op) {
    case cpu::UnaryOp::neg: return -x;
    case cpu::UnaryOp::exp: return std::exp(x);
    case cpu::UnaryOp::log: return std::log(x);
    case cpu::UnaryOp::sqrt: return std::sqrt(x);
    case cpu::UnaryOp::rsqrt: return 1.0 / std::sqrt(x);
    case cpu::UnaryOp::tanh: return std::tanh(x);
    case cpu::UnaryOp::erf: return std::erf(x);
    case cpu::UnaryOp::abs: return std::isnan(x) ? x : (x < 0 ? -x : x);
    case cpu::UnaryOp::relu: return std::isnan(x) ? x : (x > 0 ? x : 0.0);
    case cpu::UnaryOp::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case cpu::UnaryOp::gelu_tanh: {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case cpu::UnaryOp::silu: return x * sigmoid(x);
    case cpu::UnaryOp::sigmoid: return sigmoid(x);
  }
  return kNaN;
}

double ref_binary(cpu::BinaryOp op, double a, double b) {
  switch (op) {
    case cpu::BinaryOp::add: return a + b;
    case cpu::BinaryOp::sub: return a - b;
    case cpu::BinaryOp::mul: return a * b;
    case cpu::BinaryOp::div: return a / b;
    case cpu::BinaryOp::pow: return std::pow(a, b);
    case cpu::BinaryOp::maximum: return std::isnan(a) || std::isnan(b) ? kNaN : (a > b ? a : b);
    case cpu::BinaryOp::minimum: return std::isnan(a) || std::isnan(b) ? kNaN : (a < b ? a : b);
  }
  return kNaN;
}

bool ref_compare(cpu::CompareOp op, double a, double b) {
  switch (op) {
    case cpu::CompareOp::eq: return a == b;
    case cpu::CompareOp::ne: return a != b;
    case cpu::CompareOp::lt: return a < b;
    case cpu::CompareOp::le: return a <= b;
    case cpu::CompareOp::gt: return a > b;
    case cpu::CompareOp::ge: return a >= b;
  }
  return false;
}

Vec ref_reduce(const View& v, const Vec& x, const std::function<double(const Vec&)>& fn) {
  Vec y(static_cast<size_t>(v.outer * v.inner));
  Vec column(static_cast<size_t>(v.n));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t j = 0; j < v.inner; ++j) {
      for (int64_t k = 0; k < v.n; ++k) column[k] = x[v.at(o, k, j)];
      y[o * v.inner + j] = fn(column);
    }
  }
  return y;
}

double col_sum(const Vec& c) {
  double s = 0.0;
  for (double e : c) s += e;
  return s;
}

double col_max(const Vec& c) {
  double m = -kInf;
  for (double e : c) m = e > m ? e : m;
  return m;
}

double col_min(const Vec& c) {
  double m = kInf;
  for (double e : c) m = e < m ? e : m;
  return m;
}

double col_logsumexp(const Vec& c) {
  const double m = col_max(c);
  double s = 0.0;
  for (double e : c) s += std::exp(e - m);
  return m + std::log(s);
}

Vec ref_softmax(const View& v, const Vec& x, bool log) {
  Vec y(x.size());
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t j = 0; j < v.inner; ++j) {
      double m = -kInf;
      for (int64_t k = 0; k < v.n; ++k) m = std::max(m, x[v.at(o, k, j)]);
      double s = 0.0;
      for (int64_t k = 0; k < v.n; ++k) s += std::exp(x[v.at(o, k, j)] - m);
      for (int64_t k = 0; k < v.n; ++k) {
        const double z = x[v.at(o, k, j)] - m;
        y[v.at(o, k, j)] = log ? z - std::log(s) : std::exp(z) / s;
      }
    }
  }
  return y;
}

NormRef ref_norm(const Vec& x, int64_t groups, int64_t block, const Vec* weight, const Vec* bias, double eps,
                 const std::function<int64_t(int64_t)>& channel_of) {
  NormRef r{Vec(x.size()), Vec(static_cast<size_t>(groups)), Vec(static_cast<size_t>(groups))};
  for (int64_t g = 0; g < groups; ++g) {
    double mean = 0.0;
    for (int64_t i = 0; i < block; ++i) mean += x[g * block + i];
    mean /= static_cast<double>(block);
    double var = 0.0;
    for (int64_t i = 0; i < block; ++i) var += (x[g * block + i] - mean) * (x[g * block + i] - mean);
    var /= static_cast<double>(block);
    const double rstd = 1.0 / std::sqrt(var + eps);
    r.mean[g] = mean;
    r.rstd[g] = rstd;
    for (int64_t i = 0; i < block; ++i) {
      const int64_t e = g * block + i;
      const int64_t c = channel_of(e);
      r.y[e] = (x[e] - mean) * rstd * (weight ? (*weight)[c] : 1.0) + (bias ? (*bias)[c] : 0.0);
    }
  }
  return r;
}

void ref_attention(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, double scale, const Vec& q,
                   const Vec& k, const Vec& v, Vec& out, Vec& lse) {
  out.assign(BH * Nq * Dv, 0.0);
  lse.assign(BH * Nq, -kInf);
  Vec scores(Nk);
  for (int64_t b = 0; b < BH; ++b)
    for (int64_t i = 0; i < Nq; ++i) {
      if (Nk == 0) continue;
      double max_score = -kInf;
      for (int64_t j = 0; j < Nk; ++j) {
        double dotp = 0;
        for (int64_t c = 0; c < D; ++c) dotp += q[(b * Nq + i) * D + c] * k[(b * Nk + j) * D + c];
        scores[j] = scale * dotp;
        max_score = std::max(max_score, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < Nk; ++j) sum += std::exp(scores[j] - max_score);
      const double row_lse = max_score + std::log(sum);
      lse[b * Nq + i] = row_lse;
      for (int64_t j = 0; j < Nk; ++j) {
        const double p = std::exp(scores[j] - row_lse);
        for (int64_t c = 0; c < Dv; ++c) out[(b * Nq + i) * Dv + c] += p * v[(b * Nk + j) * Dv + c];
      }
    }
}

namespace {

// The window walk every sliding-window reference shares: for each output position (o0, o1, o2) of g and each
// kernel tap inside the input (padding taps skipped), visit(out, tap, in) with the flat indices of the output
// position, the tap and the input position within one (batch, channel) plane.
template <typename Visit>
void for_each_window_tap(const cpu::ConvGeometry& g, Visit&& visit) {
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
        const int64_t out_at = (o0 * g.out[1] + o1) * g.out[2] + o2;
        for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
          for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
            for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
              const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
              const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
              const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
              if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
              visit(out_at, (k0 * g.kernel[1] + k1) * g.kernel[2] + k2, (i0 * g.in[1] + i1) * g.in[2] + i2);
            }
      }
}

}  // namespace

Vec ref_conv(const cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec* bias) {
  const int64_t in_vol = prod(g.in, 3), out_vol = prod(g.out, 3), taps = prod(g.kernel, 3);
  Vec y(g.batch * g.c_out * out_vol);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t co = 0; co < g.c_out; ++co) {
      double* plane = y.data() + (b * g.c_out + co) * out_vol;
      for (int64_t o = 0; o < out_vol; ++o) plane[o] = bias ? (*bias)[co] : 0.0;
      for (int64_t ci = 0; ci < g.c_in; ++ci) {
        const double* xs = x.data() + (b * g.c_in + ci) * in_vol;
        const double* ws = w.data() + (co * g.c_in + ci) * taps;
        for_each_window_tap(g, [&](int64_t out, int64_t tap, int64_t in) { plane[out] += xs[in] * ws[tap]; });
      }
    }
  return y;
}

cpu::ConvGeometry patch_geometry(int nd, int64_t batch, int64_t c_in, int64_t c_out, const std::vector<int64_t>& in,
                                 const std::vector<int64_t>& patch) {
  cpu::ConvGeometry g{nd, batch, c_in, c_out, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}};
  for (int d = 0; d < nd; ++d) {
    g.in[d] = in[d];
    g.kernel[d] = g.stride[d] = patch[d];
    g.out[d] = in[d] * patch[d];
  }
  return g;
}

Vec ref_conv_transpose_patch(const cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec* bias) {
  const int64_t in_vol = prod(g.in, 3), taps = prod(g.kernel, 3), out_vol = in_vol * taps;
  Vec y(g.batch * g.c_out * out_vol);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t co = 0; co < g.c_out; ++co)
      for (int64_t y0 = 0; y0 < g.out[0]; ++y0)
        for (int64_t y1 = 0; y1 < g.out[1]; ++y1)
          for (int64_t y2 = 0; y2 < g.out[2]; ++y2) {
            const int64_t i0 = y0 / g.kernel[0], i1 = y1 / g.kernel[1], i2 = y2 / g.kernel[2];
            const int64_t a0 = y0 % g.kernel[0], a1 = y1 % g.kernel[1], a2 = y2 % g.kernel[2];
            double acc = bias ? (*bias)[co] : 0.0;
            for (int64_t ci = 0; ci < g.c_in; ++ci)
              acc += x[(b * g.c_in + ci) * in_vol + (i0 * g.in[1] + i1) * g.in[2] + i2] *
                     w[(ci * g.c_out + co) * taps + (a0 * g.kernel[1] + a1) * g.kernel[2] + a2];
            y[(b * g.c_out + co) * out_vol + (y0 * g.out[1] + y1) * g.out[2] + y2] = acc;
          }
  return y;
}

void ref_pool(const cpu::ConvGeometry& g, const Vec& x, Vec& avg, Vec& max, std::vector<int64_t>& argmax) {
  const int64_t in_vol = prod(g.in, 3), out_vol = prod(g.out, 3);
  const double taps = double(prod(g.kernel, 3));
  avg.assign(g.batch * g.c_in * out_vol, 0.0);
  max.assign(avg.size(), -kInf);
  argmax.assign(avg.size(), -1);
  for (int64_t plane = 0; plane < g.batch * g.c_in; ++plane)
    for_each_window_tap(g, [&](int64_t out, int64_t, int64_t in) {
      const int64_t out_at = plane * out_vol + out;
      const double v = x[plane * in_vol + in];
      avg[out_at] += v / taps;
      if (v > max[out_at]) {
        max[out_at] = v;
        argmax[out_at] = in;
      }
    });
}

Vec ref_upsample(cpu::UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                 const int64_t* out, const Vec& x) {
  const int64_t in_vol = prod(in, nd), out_vol = prod(out, nd);
  Vec y(planes * out_vol, 0.0);
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t p = 0; p < out_vol; ++p) {
      int64_t lo[3], hi[3];
      double frac[3];
      for (int d = 0; d < nd; ++d) {
        int64_t stride_after = 1;
        for (int e = d + 1; e < nd; ++e) stride_after *= out[e];
        const int64_t dst = (p / stride_after) % out[d];
        if (mode == cpu::UpsampleMode::nearest) {
          lo[d] = hi[d] = std::min<int64_t>(int64_t(std::floor(double(dst) * double(in[d]) / double(out[d]))),
                                            in[d] - 1);
          frac[d] = 0.0;
        } else {
          const double src = linear_source(align_corners, in[d], out[d], dst);
          lo[d] = int64_t(std::floor(src));
          hi[d] = std::min(lo[d] + 1, in[d] - 1);
          frac[d] = src - double(lo[d]);
        }
      }
      double acc = 0;
      for (int corner = 0; corner < (1 << nd); ++corner) {
        double weight = 1;
        int64_t src = 0;
        for (int d = 0; d < nd; ++d) {
          const bool upper = (corner >> d) & 1;
          weight *= upper ? frac[d] : 1.0 - frac[d];
          src = src * in[d] + (upper ? hi[d] : lo[d]);
        }
        acc += weight * x[plane * in_vol + src];
      }
      y[plane * out_vol + p] = acc;
    }
  return y;
}

Vec ref_pad(cpu::PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* lo, const int64_t* hi,
            double value, const Vec& x) {
  int64_t out[3];
  for (int d = 0; d < nd; ++d) out[d] = in[d] + lo[d] + hi[d];
  const int64_t in_vol = prod(in, nd), out_vol = prod(out, nd);
  Vec y(outer * out_vol);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < out_vol; ++p) {
      int64_t src = 0, rest = p, stride = out_vol;
      bool fill = false;
      for (int d = 0; d < nd; ++d) {
        stride /= out[d];
        const int64_t s = pad_source(mode, rest / stride - lo[d], in[d]);
        rest %= stride;
        fill = fill || s < 0;
        src = src * in[d] + std::max<int64_t>(s, 0);
      }
      y[o * out_vol + p] = fill ? value : x[o * in_vol + src];
    }
  return y;
}

}  // namespace shardrt::test
