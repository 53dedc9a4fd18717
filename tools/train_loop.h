// shardrt-train's run: model, optimizer, loaders and normaliser from a TrainConfig on a ddp x domain mesh; the
// training loop with its progress lines, CSV, validation, checkpoints and --resume; the plots at the end.
#pragma once
#include <functional>
#include <string>

#include "mesh/communicator.h"
#include "tools/train_config.h"

namespace shardrt::tools {

struct RunOptions {
  bool resume = false;  // continue from config.checkpoint_dir (parameters, optimizer state, loader position,
                        // normaliser, step count)
  int64_t stop_after = 0;  // > 0: stop once this many steps are done (the checkpoint written), as a job whose time
                           // ran out; the schedule still spans the whole run, so --resume continues it exactly
  std::string measure_path;  // non-empty: write the measured peak bytes and comm bytes per step (StepMeasure)
};

// Collective over MPI_COMM_WORLD (its size must be mesh.ddp * mesh.domain). Every failure is raised on every rank
// with the same message (the verdicts are agreed through the mesh). Returns the last validation relative L2 (or
// the last training loss without a validation split).
// Runs `step` on every rank of `comm` and agrees on the outcome: when it threw on any rank, every rank throws the
// lowest failing rank's error, of its kind (IoError stays IoError), with its message once (no doubled prefix), so
// no rank is left waiting in the next collective.
void agree_on(const Communicator& comm, const std::function<void()>& step);

double run_training(const TrainConfig& config, const RunOptions& options);

// shardrt-train --eval: a trained model on a Darcy split, without training. The model and its inputs come from the
// config (the run's own config.json), the weights and the normaliser from a checkpoint; it prints the split's
// relative L2 (as validation computes it, every sample) and writes <log.out_dir>/eval-panel.png of
// log.panel_sample. Collective like run_training; returns the relative L2.
struct EvalOptions {
  std::string checkpoint;  // "": <checkpoint.dir>-best when it exists, else checkpoint.dir
  std::string data;        // a split's manifest; "": data.val
};
double run_evaluation(const TrainConfig& config, const EvalOptions& options);

}  // namespace shardrt::tools
