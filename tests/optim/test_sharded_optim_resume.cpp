// Resuming from a sharded checkpoint: 10 steps in one run equal 5 steps, a save, a fresh model and optimizer, a load
// and 5 more, bit for bit on the CPU, in every mode; and a checkpoint saved in one mode (one shard layout) resumes in
// another (to the last bits of the clipping norm's summation order).
#include <mpi.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>

#include "optim/optimizer.h"
#include "tests/optim/optim_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::optim;
using namespace shardrt::test;

namespace {

std::vector<std::pair<int, int>> every_grid() {
  std::vector<std::pair<int, int>> out;
  for (int d = 1; d <= world_size(); ++d)
    if (world_size() % d == 0) out.push_back({world_size() / d, d});
  return out;
}

// One directory name for every rank (rank 0's pid), removed at the end.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    int pid = static_cast<int>(getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path = (std::filesystem::temp_directory_path() / ("shardrt_optim_resume_" + std::to_string(pid))).string();
    if (world_rank() == 0) std::filesystem::create_directories(path);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~ScratchDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::filesystem::remove_all(path);
  }
};

OptimizerConfig recipe(ShardingMode mode) {
  OptimizerConfig c;
  c.mode = mode;
  c.algorithm = Algorithm::muon_adamw;
  c.max_grad_norm = 1.5;
  c.schedule = warmup_cosine_schedule(2, 10, 0.1, 0.1);
  return c;
}

// Steps [from, to) with each ddp rank's own grads.
void run_steps(const Mesh& mesh, ToyParams& m, Optimizer& opt, int from, int to) {
  for (int t = from; t < to; ++t) {
    set_grads(m, 900 + 10 * static_cast<uint64_t>(t) + static_cast<uint64_t>(mesh.coord("ddp")));
    REQUIRE(opt.step());
  }
}

}  // namespace

TEST_CASE("resume: 10 steps == 5 + save + fresh model and optimizer + load + 5, bit for bit, every mode and mesh; "
          "a checkpoint of one mode resumes in another",
          "[optim][checkpoint]") {
  const ScratchDir scratch;
  const std::vector<ShardingMode> modes = {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh};
  for (auto grid_shape : every_grid()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    std::map<ShardingMode, std::vector<std::vector<double>>> straight;  // 10 steps in one run, per mode
    for (ShardingMode mode : modes) {
      ToyParams m;
      Optimizer opt(mesh, m, recipe(mode));
      run_steps(mesh, m, opt, 0, 10);
      straight[mode] = values(m);
    }
    for (size_t k = 0; k < modes.size(); ++k) {
      const ShardingMode saved_in = modes[k], resumed_in = modes[(k + 1) % modes.size()];
      for (ShardingMode resume : {saved_in, resumed_in}) {
        const std::string dir = scratch.path + "/ckpt";
        std::vector<std::vector<double>> at_save;
        {
          ToyParams m;
          Optimizer opt(mesh, m, recipe(saved_in));
          run_steps(mesh, m, opt, 0, 5);
          opt.save(dir);
          at_save = values(m);
        }
        ToyParams fresh(DType::f64, /*seed=*/99);  // other initial values: only the load can make them right
        REQUIRE(values(fresh) != at_save);
        Optimizer opt(mesh, fresh, recipe(resume));
        opt.load(dir);
        INFO("mesh " << mesh.str() << ": saved in " << sharding_mode_name(saved_in) << ", resumed in "
                     << sharding_mode_name(resume));
        CHECK(values(fresh) == at_save);
        CHECK(opt.steps_taken() == 5);
        CHECK(grad_of(fresh.w).to_vector() == std::vector<double>(15, 0.0));
        run_steps(mesh, fresh, opt, 5, 10);
        const auto got = values(fresh);
        if (resume == saved_in) {
          CHECK(got == straight.at(resume));
        } else {
          // Another mode sums the clipping norm's squares in other partial sums (per shard, then over ranks), so
          // the clip coefficient may differ in its last bit; AdamW is blind to that scale, Muon's momentum not quite.
          for (size_t i = 0; i < got.size(); ++i) CHECK(max_abs_diff(got[i], straight.at(resume)[i]) <= 1e-15);
        }
      }
    }
  }
}

TEST_CASE("checkpoint contents: element ranges of whole tensors keyed by state_dict names, each written once",
          "[optim][checkpoint]") {
  for (auto grid_shape : every_grid()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}) {
      ToyParams m;
      Optimizer opt(mesh, m, recipe(mode));
      const CheckpointContents c = opt.checkpoint_contents();
      CHECK(c.state.at("step") == 0);
      CHECK(c.state.at("mode") == sharding_mode_name(mode));
      // Per name, the elements written over all ranks: every element of every tensor exactly once.
      std::map<std::string, int64_t> mine;
      for (const SavedRange& r : c.ranges) {
        mine[r.name] += r.values.numel();
        if (r.name == "param.w") CHECK(r.global_shape == Shape{3, 5});
        if (r.name.rfind("momentum_buffer.", 0) == 0) CHECK((r.name == "momentum_buffer.w" || r.name == "momentum_buffer.v"));
      }
      const std::map<std::string, int64_t> want = {
          {"param.w", 15}, {"param.b", 5}, {"param.v", 8}, {"param.s", 1}, {"momentum_buffer.w", 15},
          {"momentum_buffer.v", 8}, {"exp_avg.b", 5}, {"exp_avg_sq.b", 5}, {"exp_avg.s", 1}, {"exp_avg_sq.s", 1}};
      for (const auto& [name, n] : want) {
        long long total = mine.count(name) ? mine.at(name) : 0;
        MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        INFO(sharding_mode_name(mode) << " " << mesh.str() << " " << name);
        CHECK(total == n);
      }
    }
  }
}
