// The Darcy 2-D data set: random two-valued permeability fields k on the unit square and the pressure p of the
// flow through them, written as safetensors shards plus a JSON manifest that data/loader.h reads.
//
// Two modes share the permeability of a seed and differ in the pressure solve:
//   physicsnemo  PhysicsNeMo's benchmark datapipe (Darcy2D) as it is: its cascaded coarse-to-fine Jacobi on the
//                (R+1)^2 grid, in f32, with its stencil, convergence checks and crop (data/darcy_physicsnemo.h), so
//                data and errors compare with its recipes;
//   exact        div(k grad p) = -1 with p = 0 on the boundary, a cell-centred finite-volume discretisation solved
//                by Eigen's conjugate gradient to a stated relative residual (data/darcy_exact.h).
//
// Determinism: sample i of a data set is a pure function of (seed, i) — its Fourier amplitudes are Philox draws
// at stream position i — so the same seed gives the same bits whatever the shard size, thread count or machine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardrt::data {

enum class DarcyMode { physicsnemo, exact };
// How the Fourier amplitudes are drawn. independent: 4 * F * F values per sample. darcy2d: what Darcy2D's draw
// does in fact (its init kernel seeds every thread of the 4-D launch with wp.tid() used as one integer, which is
// the first index only): one value per basis (ss, cs, sc, cc), shared by every frequency pair, so its fields form
// a 4-parameter family (and every sample of one of its batches is the same field).
enum class AmplitudeDraw { independent, darcy2d };
const char* darcy_mode_name(DarcyMode mode);    // "physicsnemo", "exact"
DarcyMode parse_darcy_mode(const std::string& name);  // ValueError listing both
const char* amplitude_draw_name(AmplitudeDraw draw);  // "independent", "darcy2d"
AmplitudeDraw parse_amplitude_draw(const std::string& name);

struct DarcyConfig {
  DarcyMode mode = DarcyMode::exact;
  int64_t resolution = 64;  // R: every field is R x R
  uint64_t seed = 0;
  // The permeability (PhysicsNeMo's defaults): a random Fourier series of nr_freq^2 terms per basis, thresholded
  // at 0 to the two values.
  int nr_freq = 5;
  AmplitudeDraw amplitude_draw = AmplitudeDraw::independent;
  float min_permeability = 0.5f;
  float max_permeability = 2.0f;
  // physicsnemo mode: Darcy2D's solver settings (its defaults). R must be a multiple of 2^(nr_multigrids-1).
  int64_t max_iterations = 30000;
  double convergence_threshold = 1e-6;
  int64_t iterations_per_convergence_check = 1000;
  int nr_multigrids = 4;
  // exact mode: the conjugate gradient stops when ||b - A p|| / ||b|| <= this.
  double relative_tolerance = 1e-8;
  int64_t max_cg_iterations = 100000;

  // ValueError naming the field and what to do, for any value out of range.
  void validate() const;
  nlohmann::json to_json() const;
};

// One sample, row-major R x R (row = x index, column = y index, as PhysicsNeMo's arrays), plus how its solve went.
struct DarcySample {
  std::vector<float> permeability;  // R*R
  std::vector<float> darcy;         // R*R
  std::vector<float> fourier;       // 4 * nr_freq * nr_freq amplitudes (ss, cs, sc, cc blocks), for provenance
  int64_t solver_iterations = 0;    // Jacobi sweeps (all levels) or CG iterations
  double solver_residual = 0;       // physicsnemo: the last inf-norm sweep change; exact: the relative residual
};

// The amplitudes of sample `index`: U(-1, 1), 4 x nr_freq x nr_freq (with AmplitudeDraw::darcy2d four draws, each
// repeated over its F x F block).
std::vector<float> darcy_fourier_amplitudes(const DarcyConfig& config, uint64_t index);
// The thresholded permeability on the (R+1) x (R+1) grid of Darcy2D, row-major (the R x R crop is the sample's).
// Computed in f32 as Darcy2D's kernel does (its 6.28318 / R spacing included).
std::vector<float> darcy_permeability_grid(const DarcyConfig& config, const std::vector<float>& fourier);

// Sample `index` of the data set the config describes.
DarcySample generate_darcy_sample(const DarcyConfig& config, uint64_t index);

// What write_darcy_split wrote.
struct DarcySplitInfo {
  std::string manifest_path;
  std::vector<std::string> shard_files;
  int64_t samples = 0;
  int64_t max_solver_iterations = 0;
  double max_solver_residual = 0;
};

// Writes samples [first, first + count) as `<dir>/darcy_<split>_NNN.safetensors` shards of at most
// samples_per_shard samples (tensors `permeability` (S, R, R) f32, `darcy` (S, R, R) f32, `fourier`
// (S, 4, F, F) f32, `sample_index` (S) i64) and the manifest `<dir>/darcy_<split>.json` (format, split, mode,
// resolution, seed, samples, first_sample, shards with their sample counts, the generator settings and the
// solver's worst residual). Samples are solved in parallel (OpenMP); files are written atomically
// (save_safetensors), the manifest last. IoError when the directory cannot be written.
DarcySplitInfo write_darcy_split(const DarcyConfig& config, const std::string& dir, const std::string& split,
                                 int64_t first, int64_t count, int64_t samples_per_shard);

}  // namespace shardrt::data
