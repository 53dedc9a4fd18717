// Darcy2D's cascaded Jacobi, in f32 like its Warp kernels (see the header for the method and its quirks).
#include "data/darcy_physicsnemo.h"

#include <algorithm>
#include <cmath>

#include "runtime/errors.h"

namespace shardrt::data {
namespace {

// p outside the grid is 0 (Darcy2D tests only -1 and n; any index outside is 0 here, see the header).
inline float p_at(const std::vector<float>& p, int64_t n, int64_t x, int64_t y) {
  if (x < 0 || y < 0 || x >= n || y >= n) return 0.0f;
  return p[static_cast<size_t>(x * n + y)];
}
inline float k_at(const std::vector<float>& k, int64_t n, int64_t x, int64_t y) {
  x = std::clamp<int64_t>(x, 0, n - 1);
  y = std::clamp<int64_t>(y, 0, n - 1);
  return k[static_cast<size_t>(x * n + y)];
}

// One sweep of level r: reads `from`, writes the level's points of `to` (its other points keep what they held).
void jacobi_sweep(const std::vector<float>& from, std::vector<float>& to, const std::vector<float>& k, int64_t n,
                  int64_t points, int64_t r, float dx) {
  const float h = dx * static_cast<float>(r);
  const float h2 = h * h;
  for (int64_t x = 0; x < points; ++x) {
    const int64_t gx = r * x + (r - 1);
    for (int64_t y = 0; y < points; ++y) {
      const int64_t gy = r * y + (r - 1);
      const float pw = p_at(from, n, gx - r, gy), pe = p_at(from, n, gx + r, gy);
      const float ps = p_at(from, n, gx, gy - r), pn = p_at(from, n, gx, gy + r);
      const float kc = k_at(k, n, gx, gy);
      const float kw = k_at(k, n, gx - r, gy), ke = k_at(k, n, gx + r, gy);
      const float ks = k_at(k, n, gx, gy - r), kn = k_at(k, n, gx, gy + r);
      const float t1 = kc * (pw + pe + ps + pn) / h2;
      const float t2 = ((ke - kw) * (pe - pw)) / (2.0f * h);
      const float t3 = ((kn - ks) * (pn - ps)) / (2.0f * h);
      to[static_cast<size_t>(gx * n + gy)] = (t1 + t2 + t3 + 1.0f) / (kc * 4.0f / h2);
    }
  }
}

float level_change(const std::vector<float>& a, const std::vector<float>& b, int64_t n, int64_t points, int64_t r) {
  float m = 0.0f;
  for (int64_t x = 0; x < points; ++x)
    for (int64_t y = 0; y < points; ++y) {
      const size_t i = static_cast<size_t>((r * x + r - 1) * n + (r * y + r - 1));
      m = std::max(m, std::fabs(a[i] - b[i]));
    }
  return m;
}

// Darcy2D's in-place upsampling, in Warp's serial CPU order.
void upsample_in_place(std::vector<float>& p, int64_t n, int64_t r) {
  for (int64_t x = 0; x < n; ++x)
    for (int64_t y = 0; y < n; ++y) {
      const int64_t mx = (x + 1) % r, my = (y + 1) % r;
      const int64_t x0 = x - mx, x1 = x + mx, y0 = y - my, y1 = y + my;
      const float d00 = p_at(p, n, x0, y0), d10 = p_at(p, n, x1, y0);
      const float d01 = p_at(p, n, x0, y1), d11 = p_at(p, n, x1, y1);
      const float rx = static_cast<float>(x - x0) / static_cast<float>(r);
      const float ry = static_cast<float>(y - y0) / static_cast<float>(r);
      const float dx0 = (1.0f - rx) * d00 + rx * d10;
      const float dx1 = (1.0f - rx) * d01 + rx * d11;
      p[static_cast<size_t>(x * n + y)] = (1.0f - ry) * dx0 + ry * dx1;
    }
}

}  // namespace

PhysicsnemoSolve solve_darcy_physicsnemo(const DarcyConfig& config, const std::vector<float>& permeability) {
  config.validate();
  const int64_t R = config.resolution, n = R + 1;
  SHARDRT_CHECK(static_cast<int64_t>(permeability.size()) == n * n, ValueError,
                "solve_darcy_physicsnemo: the permeability grid has ", permeability.size(), " values, expected (R+1)^2 = ",
                n * n, " for resolution ", R);
  const float dx = static_cast<float>(1.0 / static_cast<double>(n));
  std::vector<float> p0(static_cast<size_t>(n * n), 0.0f), p1(p0.size(), 0.0f);
  PhysicsnemoSolve out;
  const int64_t rounds = config.max_iterations / config.iterations_per_convergence_check;
  for (int level = 0; level < config.nr_multigrids; ++level) {
    const int64_t r = int64_t{1} << (config.nr_multigrids - level - 1);
    // At r = 1 Darcy2D sweeps the whole (R+1)^2 array, at coarser levels R/r points per side.
    const int64_t points = r > 1 ? R / r : n;
    for (int64_t round = 0; round < rounds; ++round) {
      for (int64_t s = 0; s < config.iterations_per_convergence_check; ++s) {
        jacobi_sweep(p0, p1, permeability, n, points, r, dx);
        std::swap(p0, p1);
        ++out.sweeps;
      }
      const float change = level_change(p0, p1, n, points, r);
      out.last_change = change;
      if (static_cast<double>(change) < config.convergence_threshold * static_cast<double>(r)) break;
    }
    if (r > 1) upsample_in_place(p0, n, r);
  }
  out.pressure = std::move(p0);
  return out;
}

}  // namespace shardrt::data
