// shardrt-darcy-gen: writes a Darcy 2-D data set (permeability and pressure, R x R) as safetensors shards plus a
// JSON manifest per split, for data/loader.h (and shardrt-train) to read.
//
//   shardrt-darcy-gen --out data/darcy --mode exact --resolution 64 --train 512 --val 64 --seed 0
//
// The training split holds samples 0..train-1 of the seed's stream, the validation split the next `val`, so the two
// never share a sample and any sample can be regenerated alone. Samples are solved in parallel (OMP_NUM_THREADS).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "data/darcy_generator.h"
#include "runtime/errors.h"

using namespace shardrt;

int main(int argc, char** argv) {
  data::DarcyConfig config;
  std::string out, mode = "exact", amplitudes;
  int64_t train = 256, val = 32, per_shard = 256;
  CLI::App app{"Generate a Darcy 2-D data set (random two-valued permeability, pressure solve) as safetensors shards"};
  app.add_option("--out", out, "output folder (darcy_<split>_NNN.safetensors and darcy_<split>.json)")->required();
  app.add_option("--mode", mode, "exact (finite volumes + Eigen CG) or physicsnemo (Darcy2D's Jacobi)")
      ->check(CLI::IsMember({"exact", "physicsnemo"}));
  app.add_option("--resolution", config.resolution, "grid points per side R (physicsnemo: a multiple of 8)");
  app.add_option("--train", train, "training samples");
  app.add_option("--val", val, "validation samples (0: none)");
  app.add_option("--seed", config.seed, "seed of the permeability draws");
  app.add_option("--samples-per-shard", per_shard, "samples per safetensors file");
  app.add_option("--nr-freq", config.nr_freq, "Fourier frequencies per direction of the permeability");
  app.add_option("--amplitudes", amplitudes,
                 "independent (4 F^2 draws per sample) or darcy2d (Darcy2D's actual draw: one per basis); "
                 "default darcy2d in physicsnemo mode, independent in exact mode")
      ->check(CLI::IsMember({"independent", "darcy2d"}));
  app.add_option("--tolerance", config.relative_tolerance, "exact: relative residual the CG stops at");
  app.add_option("--max-iterations", config.max_iterations, "physicsnemo: Jacobi sweeps per level at most");
  app.add_option("--convergence-threshold", config.convergence_threshold, "physicsnemo: inf-norm sweep change");
  app.add_option("--nr-multigrids", config.nr_multigrids, "physicsnemo: levels of the cascaded Jacobi");
  CLI11_PARSE(app, argc, argv);
  try {
    config.mode = data::parse_darcy_mode(mode);
    config.amplitude_draw = !amplitudes.empty() ? data::parse_amplitude_draw(amplitudes)
                            : config.mode == data::DarcyMode::physicsnemo ? data::AmplitudeDraw::darcy2d
                                                                           : data::AmplitudeDraw::independent;
    SHARDRT_CHECK(train >= 1 && val >= 0, ValueError, "shardrt-darcy-gen: need --train >= 1 and --val >= 0");
    const auto t0 = std::chrono::steady_clock::now();
    const data::DarcySplitInfo tr = data::write_darcy_split(config, out, "train", 0, train, per_shard);
    std::printf("train: %lld samples, %zu shard(s), %s\n", static_cast<long long>(tr.samples), tr.shard_files.size(),
                tr.manifest_path.c_str());
    double worst = tr.max_solver_residual;
    if (val > 0) {
      const data::DarcySplitInfo va = data::write_darcy_split(config, out, "val", train, val, per_shard);
      std::printf("val:   %lld samples, %zu shard(s), %s\n", static_cast<long long>(va.samples),
                  va.shard_files.size(), va.manifest_path.c_str());
      worst = std::max(worst, va.max_solver_residual);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s mode (%s amplitudes), %lld x %lld, seed %llu: %.2f s; worst %s %.3g\n", mode.c_str(),
                data::amplitude_draw_name(config.amplitude_draw),
                static_cast<long long>(config.resolution), static_cast<long long>(config.resolution),
                static_cast<unsigned long long>(config.seed), s,
                config.mode == data::DarcyMode::exact ? "relative residual" : "last sweep change", worst);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardrt-darcy-gen: %s\n", e.what());
    return 1;
  }
  return 0;
}
