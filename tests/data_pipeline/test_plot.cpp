// The Darcy panel: gnuplot writes a PNG of the requested pixel size (signature and IHDR checked), and a panel whose
// fields do not fit is a ValueError before gnuplot runs.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/darcy_generator.h"
#include "runtime/errors.h"
#include "tests/data_pipeline/darcy_fixture.h"
#include "tools/plot_darcy.h"

using namespace shardrt;

namespace {

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

TEST_CASE("plot: the Darcy panel is a PNG of the requested size", "[data][plot]") {
  const data::DarcySample s = data::generate_darcy_sample(test::small_exact_config(), 1);
  tools::DarcyPanel panel;
  panel.height = panel.width = 11;
  panel.permeability = s.permeability;
  panel.pressure = s.darcy;
  panel.prediction = s.darcy;
  for (size_t i = 0; i < panel.prediction.size(); ++i) panel.prediction[i] *= 1.0f + 0.05f * std::sin(0.3f * i);
  const double rel = tools::relative_l2(panel.prediction, panel.pressure);
  CHECK(rel > 0.005);
  CHECK(rel < 0.05);
  panel.title = "test sample 1";
  const std::string path = test::darcy_test_dir("plot") + ".png";
  tools::write_darcy_panel_png(path, panel, {900, 260});
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  unsigned char head[24] = {};
  in.read(reinterpret_cast<char*>(head), 24);
  REQUIRE(in.gcount() == 24);
  const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  CHECK(std::equal(signature, signature + 8, head));
  CHECK(std::string(reinterpret_cast<char*>(head + 12), 4) == "IHDR");
  CHECK(big_endian(head + 16) == 900);
  CHECK(big_endian(head + 20) == 260);
  CHECK(std::filesystem::file_size(path) > 5000);  // four images, not an empty canvas
  std::filesystem::remove(path);

  tools::DarcyPanel bad = panel;
  bad.prediction.pop_back();
  CHECK_THROWS_WITH(tools::write_darcy_panel_png(path, bad), Catch::Contains("11 x 11"));
  CHECK_FALSE(std::filesystem::exists(path));
}
