#include "tools/train_metrics.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <mpi.h>

#include <nlohmann/json.hpp>

#include "runtime/allocator.h"
#include "runtime/errors.h"

namespace shardrt::tools {

namespace {

std::string duration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) / 60) % 60);
  return buf;
}

}  // namespace

std::string progress_line(const StepMetrics& m, int64_t total) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "step %5lld/%lld  epoch %3lld  loss %.6g  lr %.3g  %.3f s/step  %.3g points/s  peak %.1f MiB/rank"
                "  ETA %s",
                static_cast<long long>(m.step), static_cast<long long>(total), static_cast<long long>(m.epoch), m.loss,
                m.lr, m.seconds_per_step, m.points_per_second, m.peak_mib,
                duration(m.seconds_per_step * static_cast<double>(total - m.step)).c_str());
  std::string s = buf;
  if (m.val_rel_l2) {
    std::snprintf(buf, sizeof buf, "  val rel L2 (darcy) %.4f", *m.val_rel_l2);
    s += buf;
  }
  return s;
}

MetricsCsv::MetricsCsv(const std::string& path, bool append, int64_t resumed_step) : path_(path) {
  std::vector<std::string> kept;
  if (append) {  // keep the header and the rows up to the resumed step: a killed run may have logged further
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
      if (kept.empty() || std::atoll(line.c_str()) <= resumed_step) kept.push_back(line);
  }
  f_ = std::fopen(path.c_str(), "w");
  SHARDRT_CHECK(f_ != nullptr, IoError, "shardrt-train: cannot write the metrics file '", path, "'");
  if (kept.empty()) kept.push_back("step,epoch,loss,lr,s_per_step,points_per_s,peak_mib,val_rel_l2");
  for (const std::string& l : kept) std::fprintf(f_, "%s\n", l.c_str());
  std::fflush(f_);
}

MetricsCsv::~MetricsCsv() {
  if (f_) std::fclose(f_);
}

void MetricsCsv::write(const StepMetrics& m) {
  std::fprintf(f_, "%lld,%lld,%.17g,%.17g,%.6g,%.6g,%.3f,", static_cast<long long>(m.step),
               static_cast<long long>(m.epoch), m.loss, m.lr, m.seconds_per_step, m.points_per_second, m.peak_mib);
  if (m.val_rel_l2) std::fprintf(f_, "%.17g", *m.val_rel_l2);
  std::fprintf(f_, "\n");
  std::fflush(f_);  // a person can follow the file while the run goes on
}

void progress_bar(int64_t step, int64_t total) {
  if (total <= 0) return;
  constexpr int kWidth = 40;
  const int filled = static_cast<int>(kWidth * step / total);
  std::printf("\r[%s%s] %lld/%lld", std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
              static_cast<long long>(step), static_cast<long long>(total));
  std::fflush(stdout);
}

bool stdout_is_terminal() {
  if (!::isatty(STDOUT_FILENO)) return false;
  const bool under_mpiexec = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
                             std::getenv("PMIX_RANK");
  if (!under_mpiexec) return true;
  // The launcher's stdout: "/dev/pts/N" on a terminal, a file's path or "pipe:[...]" when redirected. A launcher
  // this cannot see (another node's daemon, no /proc) counts as not a terminal: plain lines are always readable.
  char link[64], target[256];
  std::snprintf(link, sizeof link, "/proc/%d/fd/1", static_cast<int>(::getppid()));
  const ssize_t n = ::readlink(link, target, sizeof target - 1);
  if (n <= 0) return false;
  const std::string where(target, static_cast<size_t>(n));
  return where.starts_with("/dev/pts/") || where.starts_with("/dev/tty");
}

void write_loss_plot(const std::string& csv_path, const std::string& png_path, const std::string& title,
                     const std::string& loss_label) {
  const std::string tmp_png = png_path + ".tmp.png";
  const std::string script_path = png_path + ".gp";
  {
    std::ofstream s(script_path);
    s << "set terminal pngcairo size 900,500\n"
      << "set output '" << tmp_png << "'\n"
      << "set datafile separator ','\n"
      << "set key top right\nset logscale y\nset grid\n"
      << "set xlabel 'optimizer step'\nset ylabel 'loss (log scale)'\n"
      << "set title '" << title << "' noenhanced\n"
      << "plot '" << csv_path << "' every ::1 using 1:3 with lines lw 2 title '" << loss_label << "' noenhanced, \\\n"
      << "     '' every ::1 using 1:($8 == $8 ? $8 : 1/0) with linespoints pt 7 lw 2 "
      << "title 'validation: relative L2 of the pressure (physical units)' noenhanced\n";
    SHARDRT_CHECK(s.good(), IoError, "shardrt-train: cannot write the gnuplot script '", script_path, "'");
  }
  const char* env = std::getenv("SHARDRT_GNUPLOT");
  const std::string program = env && *env ? env : "gnuplot";
  const std::string command = program + " '" + script_path + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  SHARDRT_CHECK(pipe != nullptr, IoError, "shardrt-train: cannot run '", program, "' for the loss plot");
  std::string said;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe)) said += buf;
  const int status = ::pclose(pipe);
  std::filesystem::remove(script_path);
  SHARDRT_CHECK(status == 0 && std::filesystem::exists(tmp_png), IoError, "shardrt-train: gnuplot failed on the loss",
                " plot (install gnuplot-nox or set SHARDRT_GNUPLOT): ", said);
  std::filesystem::rename(tmp_png, png_path);
}

std::map<StepMeasure::Key, std::pair<int64_t, int64_t>> StepMeasure::snapshot() const {
  std::map<Key, std::pair<int64_t, int64_t>> out;
  for (const LedgerEntry& e : mesh_.flat().ledger().entries())
    out[{e.scope, e.kind, e.axis}] = {e.calls, e.bytes_sent};
  return out;
}

void StepMeasure::begin() {
  reset_peak_memory(Device::cpu());
  start_ = snapshot();
}

void StepMeasure::end() {
  peak_ = std::max(peak_, memory_stats(Device::cpu()).peak_bytes);
  for (const auto& [key, now] : snapshot()) {
    const auto before = start_.count(key) ? start_.at(key) : std::pair<int64_t, int64_t>{0, 0};
    auto& t = totals_[key];
    t.first += now.first - before.first, t.second += now.second - before.second;
  }
  ++steps_;
}

void StepMeasure::write(const std::string& path) const {
  using nlohmann::json;
  json mine = json::array();
  std::map<std::string, int64_t> per_axis;
  for (const auto& [key, t] : totals_) {
    const auto& [scope, kind, axis] = key;
    if (t.first == 0) continue;
    per_axis[axis] += t.second;
    mine.push_back({{"rank", mesh_.rank()}, {"scope", scope}, {"kind", kind}, {"axis", axis},
                    {"calls", t.first / std::max<int64_t>(1, steps_)},
                    {"bytes_sent", t.second / std::max<int64_t>(1, steps_)}});
  }
  json rank = {{"rank", mesh_.rank()}, {"peak_bytes", peak_}, {"comm_bytes_per_step", json::object()}};
  for (const auto& [axis, b] : per_axis) rank["comm_bytes_per_step"][axis] = b / std::max<int64_t>(1, steps_);
  const std::string text = json{{"rank", rank}, {"entries", mine}}.dump();
  // Rank 0 collects every rank's record (lengths first, then the texts).
  int len = static_cast<int>(text.size()), size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> lens(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (mesh_.rank() == 0) {
    int at = 0;
    for (int r = 0; r < size; ++r) displs[static_cast<size_t>(r)] = at, at += lens[static_cast<size_t>(r)];
    all.resize(static_cast<size_t>(at));
  }
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (mesh_.rank() != 0) return;
  json doc = {{"mesh", {{"ddp", mesh_.shape()[0]}, {"domain", mesh_.shape()[1]}}}, {"steps", steps_},
              {"ranks", json::array()}, {"entries_per_step", json::array()}};
  for (int r = 0; r < size; ++r) {
    const json one = json::parse(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                                            static_cast<size_t>(lens[static_cast<size_t>(r)])));
    doc["ranks"].push_back(one["rank"]);
    for (const json& e : one["entries"]) doc["entries_per_step"].push_back(e);
  }
  std::ofstream f(path);
  SHARDRT_CHECK(f.good(), IoError, "shardrt-train --measure: cannot write '", path, "'");
  f << doc.dump(1) << "\n";
}

}  // namespace shardrt::tools
