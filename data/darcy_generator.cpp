// The Darcy data set: permeability from Philox-drawn Fourier amplitudes, the pressure by the chosen solver, and
// the shards + manifest on disk.
#include "data/darcy_generator.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "data/darcy_exact.h"
#include "data/darcy_physicsnemo.h"
#include "runtime/errors.h"
#include "runtime/philox.h"
#include "runtime/safetensors.h"

namespace shardrt::data {

const char* darcy_mode_name(DarcyMode mode) { return mode == DarcyMode::physicsnemo ? "physicsnemo" : "exact"; }

DarcyMode parse_darcy_mode(const std::string& name) {
  if (name == "physicsnemo") return DarcyMode::physicsnemo;
  if (name == "exact") return DarcyMode::exact;
  throw ValueError("darcy: unknown mode '" + name + "'; the modes are physicsnemo (PhysicsNeMo's Darcy2D solver) "
                   "and exact (finite volumes + conjugate gradient)");
}

const char* amplitude_draw_name(AmplitudeDraw draw) {
  return draw == AmplitudeDraw::darcy2d ? "darcy2d" : "independent";
}

AmplitudeDraw parse_amplitude_draw(const std::string& name) {
  if (name == "independent") return AmplitudeDraw::independent;
  if (name == "darcy2d") return AmplitudeDraw::darcy2d;
  throw ValueError("darcy: unknown amplitude draw '" + name + "'; the draws are independent (4 F^2 values per "
                   "sample) and darcy2d (Darcy2D's: one value per basis, shared by every frequency)");
}

void DarcyConfig::validate() const {
  SHARDRT_CHECK(resolution >= 2, ValueError, "darcy: resolution must be at least 2, got ", resolution);
  SHARDRT_CHECK(nr_freq >= 1, ValueError, "darcy: nr_freq must be at least 1, got ", nr_freq);
  SHARDRT_CHECK(min_permeability > 0 && max_permeability > 0 && std::isfinite(min_permeability) &&
                    std::isfinite(max_permeability),
                ValueError, "darcy: permeabilities must be positive, got min ", min_permeability, " max ",
                max_permeability);
  if (mode == DarcyMode::physicsnemo) {
    SHARDRT_CHECK(nr_multigrids >= 1 && nr_multigrids <= 16, ValueError, "darcy: nr_multigrids must lie in [1, 16], got ",
                  nr_multigrids);
    const int64_t m = int64_t{1} << (nr_multigrids - 1);
    SHARDRT_CHECK(resolution % m == 0, ValueError, "darcy (physicsnemo mode): resolution ", resolution,
                  " is not a multiple of 2^(nr_multigrids-1) = ", m,
                  " (Darcy2D's levels need it); choose a multiple of ", m, " or fewer levels");
    SHARDRT_CHECK(iterations_per_convergence_check >= 1 && max_iterations >= iterations_per_convergence_check,
                  ValueError, "darcy (physicsnemo mode): need 1 <= iterations_per_convergence_check (",
                  iterations_per_convergence_check, ") <= max_iterations (", max_iterations, ")");
    SHARDRT_CHECK(convergence_threshold > 0, ValueError, "darcy: convergence_threshold must be positive, got ",
                  convergence_threshold);
  } else {
    SHARDRT_CHECK(relative_tolerance > 0 && relative_tolerance < 1, ValueError,
                  "darcy (exact mode): relative_tolerance must lie in (0, 1), got ", relative_tolerance);
    SHARDRT_CHECK(max_cg_iterations >= 1, ValueError, "darcy (exact mode): max_cg_iterations must be positive, got ",
                  max_cg_iterations);
  }
}

nlohmann::json DarcyConfig::to_json() const {
  nlohmann::json j = {{"mode", darcy_mode_name(mode)}, {"resolution", resolution}, {"seed", seed},
                      {"nr_freq", nr_freq}, {"amplitude_draw", amplitude_draw_name(amplitude_draw)},
                      {"min_permeability", min_permeability},
                      {"max_permeability", max_permeability}};
  if (mode == DarcyMode::physicsnemo) {
    j["max_iterations"] = max_iterations;
    j["convergence_threshold"] = convergence_threshold;
    j["iterations_per_convergence_check"] = iterations_per_convergence_check;
    j["nr_multigrids"] = nr_multigrids;
  } else {
    j["relative_tolerance"] = relative_tolerance;
    j["max_cg_iterations"] = max_cg_iterations;
  }
  return j;
}

std::vector<float> darcy_fourier_amplitudes(const DarcyConfig& config, uint64_t index) {
  const size_t count = static_cast<size_t>(4 * config.nr_freq * config.nr_freq);
  std::vector<float> a(count);
  // Stream position = the sample index, element = the amplitude: any sample can be drawn alone. Darcy2D's draw
  // takes one value per basis and repeats it over the basis' F x F block.
  const size_t block = static_cast<size_t>(config.nr_freq * config.nr_freq);
  for (size_t e = 0; e < count; ++e) {
    const uint64_t element = config.amplitude_draw == AmplitudeDraw::darcy2d ? e / block : e;
    const philox::U32x4 w = philox::element_bits(config.seed, index, element);
    a[e] = -1.0f + 2.0f * philox::uniform_f32(w.v[0]);
  }
  return a;
}

std::vector<float> darcy_permeability_grid(const DarcyConfig& config, const std::vector<float>& fourier) {
  const int64_t R = config.resolution, n = R + 1;
  const int nf = config.nr_freq;
  SHARDRT_CHECK(fourier.size() == static_cast<size_t>(4 * nf * nf), ValueError, "darcy_permeability_grid: ",
                fourier.size(), " amplitudes, expected 4 * nr_freq^2 = ", 4 * nf * nf);
  // Darcy2D's kernel: spacing 6.28318 / R (not 2 pi / (R+1)) over the (R+1)^2 grid, terms summed in (i, j)
  // order, each scaled by 1 / nf^2, all in f32.
  const float step = 6.28318f / static_cast<float>(R);
  const float scale = 1.0f / std::pow(static_cast<float>(nf), 2.0f);
  const size_t block = static_cast<size_t>(nf * nf);
  std::vector<float> k(static_cast<size_t>(n * n));
  for (int64_t x = 0; x < n; ++x)
    for (int64_t y = 0; y < n; ++y) {
      const float rx = step * static_cast<float>(x), ry = step * static_cast<float>(y);
      float v = 0.0f;
      for (int i = 0; i < nf; ++i)
        for (int j = 0; j < nf; ++j) {
          const float fi = static_cast<float>(i), fj = static_cast<float>(j);
          const size_t e = static_cast<size_t>(i * nf + j);
          const float ss = fourier[e] * std::sin(fi * rx) * std::sin(fj * ry);
          const float cs = fourier[block + e] * std::cos(fi * rx) * std::sin(fj * ry);
          const float sc = fourier[2 * block + e] * std::sin(fi * rx) * std::cos(fj * ry);
          const float cc = fourier[3 * block + e] * std::cos(fi * rx) * std::cos(fj * ry);
          v += scale * (ss + cs + sc + cc);
        }
      k[static_cast<size_t>(x * n + y)] = v < 0.0f ? config.min_permeability : config.max_permeability;
    }
  return k;
}

DarcySample generate_darcy_sample(const DarcyConfig& config, uint64_t index) {
  config.validate();
  const int64_t R = config.resolution, n = R + 1;
  DarcySample s;
  s.fourier = darcy_fourier_amplitudes(config, index);
  const std::vector<float> grid = darcy_permeability_grid(config, s.fourier);
  s.permeability.resize(static_cast<size_t>(R * R));
  s.darcy.resize(s.permeability.size());
  for (int64_t x = 0; x < R; ++x)
    for (int64_t y = 0; y < R; ++y) s.permeability[static_cast<size_t>(x * R + y)] = grid[static_cast<size_t>(x * n + y)];
  if (config.mode == DarcyMode::physicsnemo) {
    const PhysicsnemoSolve solve = solve_darcy_physicsnemo(config, grid);
    for (int64_t x = 0; x < R; ++x)
      for (int64_t y = 0; y < R; ++y) s.darcy[static_cast<size_t>(x * R + y)] = solve.pressure[static_cast<size_t>(x * n + y)];
    s.solver_iterations = solve.sweeps;
    s.solver_residual = solve.last_change;
  } else {
    // The same R x R permeability, one value per cell; source 1 everywhere.
    const std::vector<double> k(s.permeability.begin(), s.permeability.end());
    const std::vector<double> f(k.size(), 1.0);
    const ExactSolve solve = solve_darcy_exact(R, k, f, config.relative_tolerance, config.max_cg_iterations);
    for (size_t i = 0; i < k.size(); ++i) s.darcy[i] = static_cast<float>(solve.pressure[i]);
    s.solver_iterations = solve.iterations;
    s.solver_residual = solve.relative_residual;
  }
  return s;
}

namespace {

std::string shard_name(const std::string& split, int64_t shard) {
  std::ostringstream os;
  os << "darcy_" << split << "_" << std::setw(3) << std::setfill('0') << shard << ".safetensors";
  return os.str();
}

Tensor f32_tensor(const Shape& shape) { return Tensor::empty(shape, DType::f32); }

}  // namespace

DarcySplitInfo write_darcy_split(const DarcyConfig& config, const std::string& dir, const std::string& split,
                                 int64_t first, int64_t count, int64_t samples_per_shard) {
  config.validate();
  SHARDRT_CHECK(!split.empty() && split.find_first_of("/\\ ") == std::string::npos, ValueError,
                "write_darcy_split: the split name '", split, "' must be a non-empty word (train, val, test)");
  SHARDRT_CHECK(first >= 0 && count >= 1 && samples_per_shard >= 1, ValueError,
                "write_darcy_split: need first >= 0, count >= 1, samples_per_shard >= 1; got ", first, ", ", count,
                ", ", samples_per_shard);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SHARDRT_CHECK(!ec, IoError, "write_darcy_split: cannot create the directory '", dir, "': ", ec.message());

  const int64_t R = config.resolution, F = config.nr_freq;
  DarcySplitInfo info;
  info.samples = count;
  nlohmann::json shards = nlohmann::json::array();
  for (int64_t start = 0, shard = 0; start < count; start += samples_per_shard, ++shard) {
    const int64_t S = std::min(samples_per_shard, count - start);
    Tensor k = f32_tensor({S, R, R}), p = f32_tensor({S, R, R}), a = f32_tensor({S, 4, F, F});
    Tensor ids = Tensor::empty({S}, DType::i64);
    std::vector<DarcySample> samples(static_cast<size_t>(S));
    std::string error;
    // Samples are independent (a pure function of seed and index): solve them in parallel, any order.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t s = 0; s < S; ++s) {
      try {
        samples[static_cast<size_t>(s)] = generate_darcy_sample(config, static_cast<uint64_t>(first + start + s));
      } catch (const std::exception& e) {
#pragma omp critical(darcy_error)
        error = e.what();
      }
    }
    if (!error.empty()) throw ValueError(error);
    for (int64_t s = 0; s < S; ++s) {
      const DarcySample& d = samples[static_cast<size_t>(s)];
      std::copy(d.permeability.begin(), d.permeability.end(), k.data<float>() + s * R * R);
      std::copy(d.darcy.begin(), d.darcy.end(), p.data<float>() + s * R * R);
      std::copy(d.fourier.begin(), d.fourier.end(), a.data<float>() + s * 4 * F * F);
      ids.data<int64_t>()[s] = first + start + s;
      info.max_solver_iterations = std::max(info.max_solver_iterations, d.solver_iterations);
      info.max_solver_residual = std::max(info.max_solver_residual, d.solver_residual);
    }
    const std::string name = shard_name(split, shard);
    save_safetensors((std::filesystem::path(dir) / name).string(),
                     {{"permeability", k}, {"darcy", p}, {"fourier", a}, {"sample_index", ids}},
                     {{"mode", darcy_mode_name(config.mode)}, {"seed", std::to_string(config.seed)},
                      {"resolution", std::to_string(R)}, {"first_sample", std::to_string(first + start)}});
    info.shard_files.push_back(name);
    shards.push_back({{"file", name}, {"samples", S}, {"first_sample", first + start}});
  }

  nlohmann::json manifest = {{"format", "shardrt-darcy"}, {"version", 1}, {"split", split},
                             {"mode", darcy_mode_name(config.mode)}, {"resolution", R}, {"seed", config.seed},
                             {"samples", count}, {"first_sample", first}, {"dtype", "f32"},
                             {"fields", {"permeability", "darcy"}}, {"shards", shards},
                             {"generator", config.to_json()},
                             {"solver", {{"max_iterations", info.max_solver_iterations},
                                         {config.mode == DarcyMode::exact ? "max_relative_residual"
                                                                          : "max_last_sweep_change",
                                          info.max_solver_residual}}}};
  info.manifest_path = (std::filesystem::path(dir) / ("darcy_" + split + ".json")).string();
  const std::string tmp = info.manifest_path + ".tmp";
  {
    std::ofstream out(tmp);
    out << manifest.dump(2) << "\n";
    SHARDRT_CHECK(out.good(), IoError, "write_darcy_split: cannot write '", tmp, "'");
  }
  std::filesystem::rename(tmp, info.manifest_path, ec);
  SHARDRT_CHECK(!ec, IoError, "write_darcy_split: cannot rename '", tmp, "' to '", info.manifest_path, "': ",
                ec.message());
  return info;
}

}  // namespace shardrt::data
