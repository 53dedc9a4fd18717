// Determinism on the CPU: the same seed and the same mesh give the same bits, for inference and for training steps
// with the optimizer, run after run in one process, in every process of the job, and at 1 and 2 OpenMP threads.
// (Across meshes the bar is equality to the serial run within the parity tolerance: the check_golden_sharded cases
// of test_vit.cpp, test_flare.cpp and test_geotransolver.cpp.)
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "optim/optimizer.h"
#include "tests/models/golden_testing.h"
#include "tests/support/threads.h"

using namespace shardrt;

namespace {

// FNV-1a over the exact bytes: two results agree only when every bit does.
uint64_t hash_bits(uint64_t h, const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* b = static_cast<const unsigned char*>(c.raw_data());
  for (std::size_t i = 0; i < c.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// One serial f32 run of golden `name`'s config with the model's own seeded initialisation: the forward output,
// then `train_steps` AdamW steps on the golden's grad_output; returns the hash of the output and of every
// parameter afterwards (and, through `moved`, whether the steps moved the parameters at all).
uint64_t run_once(const std::string& name, int train_steps, bool* moved = nullptr) {
  const test::Golden g = test::load_golden(name);
  auto model = models::build_model(g.model, g.config, {DType::f32, /*seed=*/11});
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  std::map<std::string, ShardTensor> ins;
  for (const auto& [input, full] : g.inputs) {
    const Tensor local = full.dtype() == DType::f64 ? full.to(DType::f32).clone() : full.clone();
    ins[input] = from_local(local, serial, Placements(serial.ndim(), Placement::Replicate()));
  }
  const Tensor grad_output = g.grad_output.to(DType::f32).clone();
  uint64_t h = 1469598103934665603ull;
  if (train_steps == 0) {
    NoGradGuard no_grad;
    for (const ShardTensor& out : model->forward(ins)) h = hash_bits(h, full_tensor(out));
    return h;
  }
  const std::vector<double> before = model->named_parameters().front().second.to_vector();
  optim::OptimizerConfig cfg;
  cfg.adamw.lr = 1e-2;
  optim::Optimizer opt(serial, *model, cfg);
  for (int step = 0; step < train_steps; ++step) {
    opt.zero_grad();
    const std::vector<ShardTensor> out = model->forward(ins);
    h = hash_bits(h, full_tensor(out.front()));
    backward_global(out, {grad_output});
    opt.step();
  }
  for (const auto& [key, p] : model->named_parameters()) h = hash_bits(h, p);
  if (moved) *moved = model->named_parameters().front().second.to_vector() != before;
  return h;
}

// Every process of the job computed `h` for the same program: all must hold the same value.
bool same_on_every_process(uint64_t h) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<uint64_t> all(static_cast<std::size_t>(size));
  MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (uint64_t x : all)
    if (x != h) return false;
  return true;
}

}  // namespace

TEST_CASE("determinism: each bundled model's inference and 3 AdamW steps are bit-identical across runs, processes "
          "and 1 / 2 threads (CPU, f32)",
          "[models][determinism]") {
  for (const char* name : {"vit2d", "flare_irregular", "geotransolver_gale_weighted"}) {
    INFO("golden config " << name);
    for (int steps : {0, 3}) {
      INFO((steps ? "3 training steps" : "inference"));
      uint64_t one_a = 0, one_b = 0, two_a = 0, two_b = 0;
      bool moved = steps == 0;
      test::with_threads(1, [&] {
        one_a = run_once(name, steps, steps ? &moved : nullptr);
        one_b = run_once(name, steps);
      });
      test::with_threads(2, [&] {
        two_a = run_once(name, steps);
        two_b = run_once(name, steps);
      });
      CHECK(moved);  // the training steps changed the parameters, so equal hashes are not vacuous
      CHECK(one_a == one_b);
      CHECK(two_a == two_b);
      // Every kernel splits work between threads by output element (each element reduced by one thread, in a
      // fixed order), so the thread count does not change the bits.
      CHECK(one_a == two_a);
      CHECK(same_on_every_process(one_a));
    }
  }
}
