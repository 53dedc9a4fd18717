// The sharded loader on meshes 1, 2, 3, 4 and ddp x domain, with uneven rows (11 over 2, 3, 4 ranks), an uneven
// batch split and a zero-size shard: every rank's window equals the matching slice of the whole samples read
// serially, a rank reads exactly its window's bytes, prefetch changes nothing, shuffles agree on every rank and
// epochs are permutations.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "data/loader.h"
#include "runtime/errors.h"
#include "tests/data_pipeline/darcy_fixture.h"

using namespace shardrt;
using namespace shardrt::data;
using namespace shardrt::test;

namespace {

const Placement kR = Placement::Replicate();
Placement S(int d) { return Placement::Shard(d); }

// This rank's window [begin, begin + length) of dim d of the batch under `spec`.
std::pair<int64_t, int64_t> window_of(const ShardSpec& spec, int d) {
  const int axis = spec.axis_sharding(d);
  return {axis >= 0 ? spec.offset(axis) : 0, spec.local_shape()[static_cast<size_t>(d)]};
}

// Compares a loaded batch with the serial samples; returns the number of values compared.
int64_t check_batch(const DarcyBatch& b, const std::vector<std::vector<double>>& k,
                    const std::vector<std::vector<double>>& p, int64_t R, FieldLayout layout) {
  const ShardSpec& spec = b.permeability.spec();
  const bool last = layout == FieldLayout::channels_last;
  const auto [s0, bs] = window_of(spec, 0);
  const auto [r0, hs] = window_of(spec, last ? 1 : 2);
  const auto [c0, ws] = window_of(spec, last ? 2 : 3);
  const Tensor lk = b.permeability.local().to(DType::f64).contiguous();
  const Tensor lp = b.darcy.local().to(DType::f64).contiguous();
  REQUIRE(lk.numel() == bs * hs * ws);
  int64_t bad = 0, n = 0;
  for (int64_t s = 0; s < bs; ++s)
    for (int64_t r = 0; r < hs; ++r)
      for (int64_t c = 0; c < ws; ++c, ++n) {
        const size_t g = static_cast<size_t>((r0 + r) * R + (c0 + c));
        const size_t sample = static_cast<size_t>(b.samples[static_cast<size_t>(s0 + s)]);
        bad += lk.data<double>()[n] != k[sample][g];
        bad += lp.data<double>()[n] != p[sample][g];
      }
  CHECK(bad == 0);
  return n;
}

bool agree_on_every_rank(int64_t value) {
  int64_t lo = 0, hi = 0;
  MPI_Allreduce(&value, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&value, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

}  // namespace

TEST_CASE("loader: every rank's window equals the serial slice, on every mesh", "[data][loader]") {
  const std::string manifest = small_train_manifest();
  const auto k = serial_field(manifest, "permeability"), p = serial_field(manifest, "darcy");
  const int64_t R = 11, B = 3;
  for (const auto& [ddp, domain] : mesh_shapes()) {
    const Mesh mesh(MPI_COMM_WORLD, ddp, domain);
    struct Case {
      const char* name;
      LoaderOptions o;
    };
    std::vector<Case> cases;
    {
      LoaderOptions o;  // default: samples over ddp, rows over domain, channels last
      o.batch_size = B;
      o.seed = 5;
      cases.push_back({"default layout", o});
    }
    {
      LoaderOptions o;  // columns over domain, channels first, f64
      o.batch_size = B;
      o.layout = FieldLayout::channels_first;
      o.placements = {S(0), S(3)};
      o.dtype = DType::f64;
      cases.push_back({"columns, channels first", o});
    }
    {
      LoaderOptions o;  // caller-given rows with a zero-size shard on the first domain rank
      o.batch_size = B;
      o.placements = {S(0), S(1)};
      Extents rows = split_extents(R, domain);
      if (domain > 1) rows = split_extents(R, domain - 1), rows.insert(rows.begin(), 0);
      o.extents = {split_extents(B, ddp), rows};
      cases.push_back({"given extents, zero-size shard", o});
    }
    for (auto& c : cases) {
      INFO("mesh " << ddp << "x" << domain << ", " << c.name);
      DarcyLoader loader(manifest, mesh, c.o);
      REQUIRE(loader.batches_per_epoch() == 3);  // 10 samples in batches of 3: the tenth waits for another epoch
      int64_t expected_bytes = 0;
      for (int step = 0; step < 4; ++step) {  // across an epoch boundary
        const DarcyBatch b = loader.next();
        CHECK(b.epoch == step / 3);
        CHECK(b.step == step % 3);
        CHECK(b.permeability.global_shape() == batch_shape(c.o.layout, B, R, R));
        CHECK(b.darcy.spec() == b.permeability.spec());
        expected_bytes += 2 * 4 * check_batch(b, k, p, R, c.o.layout);
      }
      // Sharding is active where the mesh allows it: every rank but one given everything holds less than a whole
      // batch.
      int partial = loader.spec().local_shape() != loader.spec().global_shape(), ranks_partial = 0;
      MPI_Allreduce(&partial, &ranks_partial, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      CHECK(ranks_partial >= mesh.size() - 1);
      // Prefetch read the fifth batch already: exactly one more window.
      const int64_t window = 2 * 4 * shape_numel(loader.spec().local_shape());
      CHECK(loader.bytes_read() == expected_bytes + window);
    }
  }
}

TEST_CASE("loader: no rank reads whole samples to scatter them", "[data][loader]") {
  const std::string manifest = small_train_manifest();
  const int n = world_size();
  const Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain");
  LoaderOptions o;
  o.batch_size = 2;
  o.prefetch = false;
  DarcyLoader loader(manifest, mesh, o);
  (void)loader.next();
  const int64_t mine = loader.bytes_read();
  // Two samples of two f32 11 x 11 fields; this rank's rows of them only.
  const int64_t whole = 2 * 2 * 4 * 11 * 11;
  CHECK(mine == 2 * 2 * 4 * 11 * split_extents(11, n)[static_cast<size_t>(world_rank())]);
  if (n > 1) CHECK(mine < whole);
  int64_t sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(sum == whole);  // together the ranks read each byte once
}

TEST_CASE("loader: prefetch gives the same batches as no prefetch; seek resumes", "[data][loader]") {
  const std::string manifest = small_train_manifest();
  const auto [ddp, domain] = mesh_shapes().back();
  const Mesh mesh(MPI_COMM_WORLD, ddp, domain);
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 99;
  LoaderOptions no_prefetch = o;
  no_prefetch.prefetch = false;
  DarcyLoader a(manifest, mesh, o), b(manifest, mesh, no_prefetch), c(manifest, mesh, o);
  c.seek(3);
  for (int step = 0; step < 7; ++step) {
    const DarcyBatch x = a.next(), y = b.next();
    CHECK(x.samples == y.samples);
    const Tensor xk = x.permeability.local(), yk = y.permeability.local();
    REQUIRE(xk.numel() == yk.numel());
    CHECK(std::memcmp(xk.raw_data(), yk.raw_data(), xk.nbytes()) == 0);
    CHECK(std::memcmp(x.darcy.local().raw_data(), y.darcy.local().raw_data(), xk.nbytes()) == 0);
    if (step >= 3) {
      const DarcyBatch z = c.next();
      CHECK(z.samples == x.samples);
      CHECK(z.epoch == x.epoch);
      CHECK(std::memcmp(z.darcy.local().raw_data(), x.darcy.local().raw_data(), xk.nbytes()) == 0);
    }
  }
}

TEST_CASE("loader: shuffles agree on every rank, each epoch is a new permutation", "[data][loader]") {
  const int64_t S = 10;
  std::set<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    const std::vector<int64_t> order = epoch_order(S, 42, epoch, true);
    CHECK(std::set<int64_t>(order.begin(), order.end()).size() == static_cast<size_t>(S));
    int64_t hash = 0;
    for (int64_t v : order) hash = hash * 31 + v;
    CHECK(agree_on_every_rank(hash));
    orders.insert(order);
  }
  CHECK(orders.size() == 4);
  CHECK(epoch_order(S, 42, 1, true) == epoch_order(S, 42, 1, true));
  CHECK(epoch_order(S, 42, 1, true) != epoch_order(S, 43, 1, true));
  CHECK(epoch_order(S, 42, 1, false) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});

  // Through the loader: every sample of an epoch once (batches of 5 cover all 10).
  const Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain");
  LoaderOptions o;
  o.batch_size = 5;
  DarcyLoader loader(small_train_manifest(), mesh, o);
  std::set<int64_t> seen;
  for (int i = 0; i < 2; ++i)
    for (int64_t s : loader.next().samples) seen.insert(s);
  CHECK(seen.size() == 10);
}

TEST_CASE("loader: bad options are typed errors naming what is wrong", "[data][loader]") {
  const std::string manifest = small_train_manifest();
  const Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain");
  LoaderOptions o;
  o.batch_size = 11;
  CHECK_THROWS_WITH(DarcyLoader(manifest, mesh, o), Catch::Contains("batch_size 11") && Catch::Contains("[1, 10]"));
  o.batch_size = 2;
  o.placements = {S(3)};
  CHECK_THROWS_WITH(DarcyLoader(manifest, mesh, o), Catch::Contains("channel dim"));
  o.placements = {Placement::Partial()};
  CHECK_THROWS_AS(DarcyLoader(manifest, mesh, o), ValueError);
  o.placements = {S(1)};
  o.extents = {{12}};
  if (world_size() == 1) CHECK_THROWS_AS(DarcyLoader(manifest, mesh, o), ShapeError);
  o = LoaderOptions{};
  o.dtype = DType::i64;
  CHECK_THROWS_WITH(DarcyLoader(manifest, mesh, o), Catch::Contains("f32 or f64"));
  CHECK_THROWS_WITH(DarcyLoader("/nonexistent/darcy_train.json", mesh, LoaderOptions{}),
                    Catch::Contains("shardrt-darcy-gen"));
}
