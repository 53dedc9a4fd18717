// shardrt-plan: before a job is queued, what a shardrt-train config costs each rank of a ddp x domain mesh: the
// bytes of parameters, grads, optimizer state, buffers, batches and activations, the peak, and the bytes each rank
// sends per training step per mesh axis (tools/plan_estimate.h says how each figure is obtained).
//
//   shardrt-plan --config tools/configs/darcy_flare.json --ddp 4 --domain 16 --resolution 1024 [--json]
//   shardrt-plan --config ... --check measured.json      (against shardrt-train --measure; exit 1 when off)
//
// Runs on one process (no mpiexec needed); the mesh is only arithmetic here.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "runtime/errors.h"
#include "tools/mpi_session.h"
#include "tools/plan_estimate.h"
#include "tools/train_config.h"

using namespace shardrt;

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  std::string config_path, check_path;
  std::vector<std::string> overrides;
  int ddp = 0, domain = 0;
  int64_t resolution = 0, probe_points = 1 << 16;
  double tolerance = 0.15;
  bool as_json = false;
  CLI::App app{"Plan a shardrt-train run: bytes per rank and communication per step on a ddp x domain mesh"};
  app.add_option("--config", config_path, "shardrt-train's JSON config")->required();
  app.add_option("--set", overrides, "override one key, KEY=VALUE (as shardrt-train)")->take_all();
  app.add_option("--ddp", ddp, "ddp ranks (default: the config's mesh.ddp)")->check(CLI::PositiveNumber);
  app.add_option("--domain", domain, "domain ranks (default: the config's mesh.domain)")->check(CLI::PositiveNumber);
  app.add_option("--resolution", resolution, "grid R (R x R points; default: the training manifest's)");
  app.add_option("--probe-points", probe_points,
                 "largest local problem the activation probe runs at; above it, two probes and a linear fit");
  app.add_flag("--json", as_json, "print the plan as JSON");
  app.add_option("--check", check_path, "compare with shardrt-train --measure's JSON (exit 1 when off)");
  app.add_option("--tolerance", tolerance, "relative peak-bytes tolerance of --check (comm bytes must be equal)");
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  if (!session.is_root()) return 0;  // one process plans; further ranks of an mpiexec have nothing to do

  try {
    std::vector<std::string> sets = overrides;
    if (ddp > 0) sets.push_back("mesh.ddp=" + std::to_string(ddp));
    if (domain > 0) sets.push_back("mesh.domain=" + std::to_string(domain));
    tools::PlanRequest req;
    req.config = tools::load_train_config(config_path, sets);
    req.probe_points = probe_points;
    req.resolution = resolution;
    if (req.resolution == 0) {
      SHARDRT_CHECK(!req.config.train_manifest.empty(), ValueError,
                    "shardrt-plan: give --resolution (no data.train manifest to read it from)");
      req.resolution = data::load_darcy_manifest(req.config.train_manifest).resolution;
    }
    const tools::Plan plan = tools::make_plan(req);
    if (as_json) std::printf("%s\n", tools::plan_json(plan).dump(2).c_str());
    else std::printf("%s", tools::plan_table(plan).c_str());
    if (!check_path.empty()) {
      std::ifstream f(check_path);
      SHARDRT_CHECK(f.good(), IoError, "shardrt-plan: cannot open the measurement '", check_path, "'");
      bool ok = false;
      std::string report;
      try {
        report = tools::check_against(plan, nlohmann::json::parse(f), tolerance, ok);
      } catch (const nlohmann::json::exception& e) {
        throw IoError("shardrt-plan: '" + check_path + "' is not a measurement of shardrt-train --measure (" +
                      e.what() + "); measure again");
      }
      std::printf("\nplan against %s (peak within %.0f%%, comm bytes exact):\n%s", check_path.c_str(),
                  100 * tolerance, report.c_str());
      if (!ok) {
        std::fprintf(stderr, "shardrt-plan: the plan does not match the measurement %s\n", check_path.c_str());
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
