// The normaliser: computed sharded with one all-reduce, equal to the serial statistics on every mesh; saved and
// loaded as JSON and as checkpoint state; applied by the loader.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "data/loader.h"
#include "data/normalizer.h"
#include "data/shard_reader.h"
#include "mesh/ledger.h"
#include "runtime/errors.h"
#include "tests/data_pipeline/darcy_fixture.h"

using namespace shardrt;
using namespace shardrt::data;
using namespace shardrt::test;

namespace {

FieldStats serial_stats(const std::vector<std::vector<double>>& samples) {
  double sum = 0, count = 0;
  for (const auto& s : samples)
    for (double v : s) sum += v, count += 1;
  const double mean = sum / count;
  double sq = 0;
  for (const auto& s : samples)
    for (double v : s) sq += (v - mean) * (v - mean);
  return {mean, std::sqrt(sq / count)};
}

}  // namespace

TEST_CASE("normaliser: sharded statistics equal the serial ones, with one all-reduce", "[data][normalizer]") {
  const std::string manifest = small_train_manifest();
  const FieldStats k = serial_stats(serial_field(manifest, "permeability"));
  const FieldStats p = serial_stats(serial_field(manifest, "darcy"));
  CHECK(k.std > 0.1);
  CHECK(p.mean > 0);
  for (const auto& [ddp, domain] : mesh_shapes()) {
    auto ledger = std::make_shared<CommLedger>();
    CommOptions opts;
    opts.ledger = ledger;
    const Mesh mesh(MPI_COMM_WORLD, ddp, domain, opts);
    auto counter = std::make_shared<data::ByteCounter>();
    const Normalizer n = compute_normalizer(manifest, mesh, counter);
    INFO("mesh " << ddp << "x" << domain);
    CHECK(n.permeability.mean == Approx(k.mean).epsilon(1e-12));
    CHECK(n.permeability.std == Approx(k.std).epsilon(1e-10));
    CHECK(n.darcy.mean == Approx(p.mean).epsilon(1e-12));
    CHECK(n.darcy.std == Approx(p.std).epsilon(1e-10));
    // One all-reduce of 4 f64 sums, nothing else.
    REQUIRE(ledger->total_calls() == 1);
    CHECK(ledger->entries().at(0).kind == "all_reduce");
    CHECK(ledger->total_bytes() == 4 * 8 * (mesh.size() - 1));
    // This rank's share of the split's 10 * 11 rows, both fields, f32: nothing else.
    const int64_t rows = split_extents(10 * 11, mesh.size())[static_cast<size_t>(mesh.rank())];
    CHECK(counter->bytes.load() == rows * 11 * 4 * 2);
  }
}

TEST_CASE("normaliser: JSON and checkpoint state round-trip; the loader applies it", "[data][normalizer]") {
  Normalizer n;
  n.permeability = {1.25, 0.75};
  n.darcy = {4.52e-2, 2.79e-2};
  const Normalizer j = Normalizer::from_json(n.to_json());
  CHECK(j.darcy.std == n.darcy.std);
  CHECK(j.permeability.mean == n.permeability.mean);
  const std::string path = darcy_test_dir("norm") + ".json";
  n.save(path);
  const Normalizer l = Normalizer::load(path);
  CHECK(l.darcy.mean == n.darcy.mean);
  std::filesystem::remove(path);
  const Normalizer s = Normalizer::from_state(n.state());
  CHECK(s.permeability.std == n.permeability.std);
  CHECK(s.darcy.mean == n.darcy.mean);
  CHECK_THROWS_WITH(Normalizer::from_json({{"darcy", {{"mean", 0}, {"std", 1}}}}), Catch::Contains("permeability"));
  CHECK_THROWS_WITH(Normalizer::from_json({{"permeability", {{"mean", 0}, {"std", 0}}}, {"darcy", {{"mean", 0}, {"std", 1}}}}),
                    Catch::Contains("std must be positive"));
  CHECK_THROWS_AS(Normalizer::from_state({}), IoError);

  const Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain");
  LoaderOptions plain, normed;
  plain.batch_size = normed.batch_size = 2;
  plain.dtype = normed.dtype = DType::f64;
  normed.normalizer = n;
  DarcyLoader a(small_train_manifest(), mesh, plain), b(small_train_manifest(), mesh, normed);
  const DarcyBatch x = a.next(), y = b.next();
  const double* xp = x.darcy.local().data<double>();
  const double* yp = y.darcy.local().data<double>();
  const double* xk = x.permeability.local().data<double>();
  const double* yk = y.permeability.local().data<double>();
  for (int64_t i = 0; i < x.darcy.local().numel(); ++i) {
    CHECK(yp[i] == Approx((xp[i] - n.darcy.mean) / n.darcy.std).epsilon(1e-14));
    CHECK(yk[i] == Approx((xk[i] - n.permeability.mean) / n.permeability.std).epsilon(1e-14));
  }
  Tensor back = y.darcy.local().clone();
  n.denormalize("darcy", back);
  for (int64_t i = 0; i < back.numel(); ++i) CHECK(back.data<double>()[i] == Approx(xp[i]).epsilon(1e-14));
}
