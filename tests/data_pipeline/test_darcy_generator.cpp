// The generator: the same seed gives the same bits (whatever the shard size), two-valued permeability, and the
// physicsnemo mode's output is the fixed point of Darcy2D's own stencil (its 2h cross-term scaling included).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "data/darcy_generator.h"
#include "data/darcy_physicsnemo.h"
#include "runtime/errors.h"
#include "runtime/safetensors.h"
#include "tests/data_pipeline/darcy_fixture.h"

using namespace shardrt;
using namespace shardrt::data;

namespace {

DarcyConfig physicsnemo_config(int64_t resolution) {
  DarcyConfig c;
  c.mode = DarcyMode::physicsnemo;
  c.resolution = resolution;
  c.seed = 11;
  return c;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Darcy2D's update at point (x, y) of the finest level, written out again from its kernel's description:
// p <- (k (pW + pE + pS + pN)/h^2 + (kE - kW)(pE - pW)/(2h) + (kN - kS)(pN - pS)/(2h) + 1) / (4k/h^2),
// p zero outside the (R+1)^2 grid, k clamped to it.
double darcy2d_update(const std::vector<float>& p, const std::vector<float>& k, int64_t n, int64_t x, int64_t y) {
  auto P = [&](int64_t a, int64_t b) -> double {
    return a < 0 || b < 0 || a >= n || b >= n ? 0.0 : p[static_cast<size_t>(a * n + b)];
  };
  auto K = [&](int64_t a, int64_t b) -> double {
    a = std::clamp<int64_t>(a, 0, n - 1), b = std::clamp<int64_t>(b, 0, n - 1);
    return k[static_cast<size_t>(a * n + b)];
  };
  const double h = 1.0 / static_cast<double>(n), h2 = h * h;
  const double t1 = K(x, y) * (P(x - 1, y) + P(x + 1, y) + P(x, y - 1) + P(x, y + 1)) / h2;
  const double t2 = (K(x + 1, y) - K(x - 1, y)) * (P(x + 1, y) - P(x - 1, y)) / (2 * h);
  const double t3 = (K(x, y + 1) - K(x, y - 1)) * (P(x, y + 1) - P(x, y - 1)) / (2 * h);
  return (t1 + t2 + t3 + 1.0) / (4.0 * K(x, y) / h2);
}

}  // namespace

TEST_CASE("Darcy generator: the same seed gives the same bits, another seed another field", "[data][generator]") {
  for (DarcyMode mode : {DarcyMode::exact, DarcyMode::physicsnemo}) {
    DarcyConfig c = physicsnemo_config(16);
    c.mode = mode;
    const DarcySample a = generate_darcy_sample(c, 3), b = generate_darcy_sample(c, 3);
    CHECK(same_bits(a.permeability, b.permeability));
    CHECK(same_bits(a.darcy, b.darcy));
    CHECK(same_bits(a.fourier, b.fourier));
    const DarcySample other_index = generate_darcy_sample(c, 4);
    CHECK_FALSE(same_bits(a.fourier, other_index.fourier));
    c.seed += 1;
    CHECK_FALSE(same_bits(a.fourier, generate_darcy_sample(c, 3).fourier));
  }
}

TEST_CASE("Darcy generator: shards of any size hold the same samples, bit for bit", "[data][generator]") {
  DarcyConfig c = test::small_exact_config();
  const std::string d1 = test::darcy_test_dir("shards_a"), d2 = test::darcy_test_dir("shards_b");
  const DarcySplitInfo one = write_darcy_split(c, d1, "train", 0, 6, 6);
  const DarcySplitInfo three = write_darcy_split(c, d2, "train", 0, 6, 2);
  CHECK(one.shard_files.size() == 1);
  CHECK(three.shard_files.size() == 3);
  CHECK(three.shard_files[0] == "darcy_train_000.safetensors");
  for (const char* field : {"permeability", "darcy"}) {
    const auto a = test::serial_field(one.manifest_path, field), b = test::serial_field(three.manifest_path, field);
    REQUIRE(a.size() == 6);
    REQUIRE(b.size() == 6);
    for (size_t s = 0; s < 6; ++s) CHECK(std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(double)) == 0);
  }
  // The manifest says what the files hold; the shard says which samples.
  const DarcyManifest m = load_darcy_manifest(three.manifest_path);
  CHECK(m.samples == 6);
  CHECK(m.resolution == 11);
  CHECK(m.seed == 7);
  CHECK(m.mode == "exact");
  CHECK(m.shards.size() == 3);
  CHECK(m.raw.at("solver").at("max_relative_residual").get<double>() <= 1e-10);
  const SafetensorsFile f = load_safetensors(m.shards[1].path);
  CHECK(f.get("sample_index").data<int64_t>()[0] == 2);
  CHECK(f.get("fourier").shape() == Shape{2, 4, 5, 5});
  CHECK(f.metadata().at("mode") == "exact");
  std::filesystem::remove_all(d1);
  std::filesystem::remove_all(d2);
}

TEST_CASE("Darcy generator: permeability takes the two values, amplitudes lie in (-1, 1)", "[data][generator]") {
  DarcyConfig c = physicsnemo_config(32);
  int64_t low = 0, high = 0;
  for (uint64_t i = 0; i < 8; ++i) {
    const std::vector<float> a = darcy_fourier_amplitudes(c, i);
    REQUIRE(a.size() == 100);
    for (float v : a) CHECK((v >= -1.0f && v < 1.0f));
    for (float v : darcy_permeability_grid(c, a)) {
      CHECK((v == 0.5f || v == 2.0f));
      (v == 0.5f ? low : high) += 1;
    }
  }
  // A field thresholded at 0 of zero-mean random series: both values are common.
  CHECK(low > 8 * 33 * 33 / 5);
  CHECK(high > 8 * 33 * 33 / 5);
}

TEST_CASE("Darcy generator: Darcy2D's amplitude draw repeats one value per basis", "[data][generator]") {
  DarcyConfig c = physicsnemo_config(16);
  c.amplitude_draw = AmplitudeDraw::darcy2d;
  const std::vector<float> shared = darcy_fourier_amplitudes(c, 5);
  REQUIRE(shared.size() == 100);
  for (int q = 0; q < 4; ++q)
    for (int e = 0; e < 25; ++e) CHECK(shared[static_cast<size_t>(q * 25 + e)] == shared[static_cast<size_t>(q * 25)]);
  CHECK(shared[0] != shared[25]);
  // The independent draw takes stream element e for amplitude e, Darcy2D's takes element q for all of block q:
  // they agree at amplitude 0 only.
  c.amplitude_draw = AmplitudeDraw::independent;
  const std::vector<float> independent = darcy_fourier_amplitudes(c, 5);
  CHECK(independent[1] != independent[0]);
  CHECK(independent[0] == shared[0]);  // element 0 is element 0 in both
  CHECK(parse_amplitude_draw("darcy2d") == AmplitudeDraw::darcy2d);
  CHECK_THROWS_WITH(parse_amplitude_draw("shared"), Catch::Contains("independent") && Catch::Contains("darcy2d"));
}

TEST_CASE("Darcy generator (physicsnemo): the output is the fixed point of Darcy2D's stencil", "[data][generator]") {
  const DarcyConfig c = physicsnemo_config(16);
  const int64_t n = 17;
  const std::vector<float> k = darcy_permeability_grid(c, darcy_fourier_amplitudes(c, 2));
  const PhysicsnemoSolve s = solve_darcy_physicsnemo(c, k);
  // Converged at the finest level: the last sweep moved no point by more than the threshold.
  CHECK(s.last_change < c.convergence_threshold);
  CHECK(s.sweeps % c.iterations_per_convergence_check == 0);
  double worst = 0, pmax = 0;
  for (int64_t x = 0; x < n; ++x)
    for (int64_t y = 0; y < n; ++y) {
      const double p = s.pressure[static_cast<size_t>(x * n + y)];
      worst = std::max(worst, std::fabs(darcy2d_update(s.pressure, k, n, x, y) - p));
      pmax = std::max(pmax, p);
    }
  INFO("largest change of one more sweep " << worst << ", max pressure " << pmax);
  CHECK(worst < 2e-6);
  CHECK(pmax > 0.01);
  CHECK(pmax < 0.2);
  // The crop: the sample is the (R+1)^2 grid's first R rows and columns.
  const DarcySample sample = generate_darcy_sample(c, 2);
  CHECK(sample.darcy[static_cast<size_t>(3 * 16 + 5)] == s.pressure[static_cast<size_t>(3 * n + 5)]);
  CHECK(sample.permeability[static_cast<size_t>(15 * 16 + 15)] == k[static_cast<size_t>(15 * n + 15)]);
}

TEST_CASE("Darcy generator: bad settings are ValueErrors saying what to do", "[data][generator]") {
  DarcyConfig c = physicsnemo_config(20);  // not a multiple of 8
  CHECK_THROWS_WITH(generate_darcy_sample(c, 0), Catch::Contains("multiple of 2^(nr_multigrids-1) = 8"));
  c.resolution = 1;
  CHECK_THROWS_AS(generate_darcy_sample(c, 0), ValueError);
  CHECK_THROWS_WITH(parse_darcy_mode("jacobi"), Catch::Contains("physicsnemo") && Catch::Contains("exact"));
  CHECK_THROWS_AS(write_darcy_split(test::small_exact_config(), test::darcy_test_dir("bad"), "a/b", 0, 1, 1), ValueError);
  CHECK_THROWS_AS(load_darcy_manifest("/nonexistent/darcy_train.json"), IoError);
}
