// shardrt-train: trains a bundled model (FLARE, ...) on the Darcy data set on a ddp x domain mesh, from one JSON
// config with command-line overrides (docs/training.md).
//
//   mpiexec -n 4 shardrt-train --config tools/configs/darcy_flare.json --set optimizer.lr=2e-3 [--resume]
//   mpiexec -n 4 shardrt-train --config RUN/config.json --eval [--checkpoint DIR] [--eval-data MANIFEST]
//
// Prints a line per log.every steps, writes <out_dir>/metrics.csv, config.json, loss.png, panel.png and the
// checkpoint; a failure on any rank ends every rank with the same message.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "mesh/agree.h"
#include "mesh/mesh.h"
#include "tools/mpi_session.h"
#include "tools/train_config.h"
#include "tools/train_loop.h"

using namespace shardrt;

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  std::string config_path;
  std::vector<std::string> overrides;
  tools::RunOptions options;
  bool print_config = false;
  CLI::App app{"Train a bundled model on Darcy data on a ddp x domain mesh, from a JSON config (docs/training.md)"};
  app.add_option("--config", config_path, "JSON config (keys: docs/training.md; unknown keys are errors)");
  app.add_option("--set", overrides, "override one key, KEY=VALUE with VALUE as JSON (e.g. --set optimizer.lr=1e-3)")
      ->take_all();
  app.add_flag("--resume", options.resume, "continue from checkpoint.dir (weights, optimizer, loader, normaliser)");
  app.add_option("--stop-after", options.stop_after, "stop after this many steps, checkpoint written (then --resume)");
  app.add_option("--measure", options.measure_path,
                 "write per rank the peak bytes within a step and the comm bytes per step per mesh axis as JSON "
                 "(to check shardrt-plan)");
  bool eval = false;
  tools::EvalOptions eval_options;
  app.add_flag("--eval", eval, "evaluate a checkpoint on a Darcy split instead of training (relative L2, "
               "<out_dir>/eval-panel.png)");
  app.add_option("--checkpoint", eval_options.checkpoint,
                 "with --eval: the checkpoint directory (default <checkpoint.dir>-best, else checkpoint.dir)");
  app.add_option("--eval-data", eval_options.data, "with --eval: the split's manifest (default data.val)");
  app.add_flag("--print-config", print_config, "print the merged config (defaults + file + --set) and stop");
  std::string device;
  app.add_option("--device", device, "train on this device, e.g. cuda:0 (the config key \"device\"; default cpu)");
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  if (!device.empty()) overrides.push_back("device=\"" + device + "\"");

  std::string error;
  try {
    // Every rank reads the config; their verdicts are agreed, so a bad key stops all ranks alike.
    const Mesh start(MPI_COMM_WORLD, 1, session.size());
    tools::TrainConfig config;
    tools::agree_on(start.flat(), [&] { config = tools::load_train_config(config_path, overrides); });
    if (print_config) {
      if (session.is_root()) std::printf("%s\n", config.document.dump(2).c_str());
    } else if (eval) {
      tools::run_evaluation(config, eval_options);
    } else {
      tools::run_training(config, options);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Agreed errors are the same on every rank: rank 0 prints them once. A failure of some ranks only (rank 0's
  // plots) is printed by those ranks.
  int failed = error.empty() ? 0 : 1, failures = 0;
  MPI_Allreduce(&failed, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (failed && (failures < session.size() || session.is_root())) 
    std::fprintf(stderr, "%s\n", error.c_str());
  return failures > 0 ? 1 : 0;
}
