// What shardrt-train shows and records (rank 0 only): the progress lines, a progress bar on a terminal, the CSV of
// metrics, and the loss curves drawn by gnuplot at the end.
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <map>
#include <string>
#include <tuple>

#include "mesh/mesh.h"

namespace shardrt::tools {

struct StepMetrics {
  int64_t step = 0;  // optimizer steps taken, after this one
  int64_t epoch = 0;
  double loss = 0, lr = 0;
  double seconds_per_step = 0;  // over the steps since the last line
  double points_per_second = 0;
  double peak_mib = 0;             // the largest of the ranks' peak allocator bytes
  std::optional<double> val_rel_l2;  // set on validation steps
};

// One line a person reads: step, epoch, loss, lr, s/step, points/s, peak MiB per rank, ETA.
std::string progress_line(const StepMetrics& m, int64_t total_steps);

// The CSV: step,epoch,loss,lr,s_per_step,points_per_s,peak_mib,val_rel_l2 (val_rel_l2 empty off validation
// steps). append: a resumed run continues the file (rows past the resumed step are dropped first).
class MetricsCsv {
 public:
  MetricsCsv(const std::string& path, bool append, int64_t resumed_step);
  ~MetricsCsv();
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

// A bar on the current line ("\r[#####     ] 120/400"); the caller decides when (log.progress_bar).
void progress_bar(int64_t step, int64_t total_steps);

// Whether this process's standard output reaches a person's terminal. Under mpiexec a rank's stdout is a
// pseudo-terminal of the launcher's even when the launcher's own output goes to a file, so there the launcher's
// stdout (the parent process's, read from /proc) decides; log.progress_bar "auto" draws the bar only then.
bool stdout_is_terminal();

// The loss curves (training loss per step, validation relative L2) from the CSV, as a PNG through gnuplot
// ($SHARDRT_GNUPLOT or gnuplot). `loss_label` names the training loss's quantity and units (training_loss_label).
// IoError with gnuplot's output when it fails.
void write_loss_plot(const std::string& csv_path, const std::string& png_path, const std::string& title,
                     const std::string& loss_label);

// What shardrt-train --measure records, to check shardrt-plan against: per rank, the peak allocator bytes within
// a training step (the peak is reset as each step starts, so setup, validation and checkpoints are left out) and
// the ledger's bytes sent per mesh axis within the steps (from the first batch read to the optimizer's update;
// the per-step loss check and the progress lines are outside), divided by the steps measured.
class StepMeasure {
 public:
  explicit StepMeasure(const Mesh& mesh) : mesh_(mesh) {}
  void begin();
  void end();
  // Collective over the mesh (plain MPI, not counted): rank 0 writes the JSON document
  //   {"mesh": {"ddp", "domain"}, "steps", "ranks": [{"rank", "peak_bytes", "comm_bytes_per_step": {axis: bytes}}],
  //    "entries_per_step": [{"rank", "scope", "kind", "axis", "calls", "bytes_sent"}]}.
  void write(const std::string& path) const;

 private:
  using Key = std::tuple<std::string, std::string, std::string>;
  std::map<Key, std::pair<int64_t, int64_t>> snapshot() const;
  Mesh mesh_;
  int64_t steps_ = 0, peak_ = 0;
  std::map<Key, std::pair<int64_t, int64_t>> start_, totals_;  // (calls, bytes)
};

}  // namespace shardrt::tools
