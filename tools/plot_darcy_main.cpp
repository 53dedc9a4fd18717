// shardrt-plot-darcy: the PNG panel of one Darcy sample — permeability, true pressure, a model's predicted pressure
// and the error — through gnuplot.
//
//   shardrt-plot-darcy --data data/darcy/darcy_val.json --sample 3 --prediction pred.safetensors --out panel.png
//
// The prediction file holds a tensor (--prediction-key, default "darcy") of height * width values, or a stack of
// them with the sample first (--prediction-sample picks one, default 0).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>

#include "data/manifest.h"
#include "data/shard_reader.h"
#include "runtime/errors.h"
#include "runtime/safetensors.h"
#include "tools/plot_darcy.h"

using namespace shardrt;

int main(int argc, char** argv) {
  std::string manifest_path, prediction_path, key = "darcy", out, size_text = "1600x420", title;
  int64_t sample = 0, prediction_sample = 0;
  CLI::App app{"Write the Darcy panel (permeability, true and predicted pressure, error) of one sample as a PNG"};
  app.add_option("--data", manifest_path, "manifest of a split (darcy_<split>.json)")->required();
  app.add_option("--sample", sample, "sample index within the split");
  app.add_option("--prediction", prediction_path, "safetensors file with the predicted pressure")->required();
  app.add_option("--prediction-key", key, "tensor name in the prediction file");
  app.add_option("--prediction-sample", prediction_sample, "which sample of a stacked prediction tensor");
  app.add_option("--out", out, "PNG to write")->required();
  app.add_option("--size", size_text, "pixels, WIDTHxHEIGHT");
  app.add_option("--title", title, "title (default: the sample and its relative L2 error)");
  CLI11_PARSE(app, argc, argv);
  try {
    tools::PanelSize size;
    char x = 0;
    std::istringstream in(size_text);
    in >> size.width_px >> x >> size.height_px;
    SHARDRT_CHECK(in && x == 'x', ValueError, "shardrt-plot-darcy: --size '", size_text, "' is not WIDTHxHEIGHT");

    const data::DarcyManifest m = data::load_darcy_manifest(manifest_path);
    const auto [shard, row] = m.locate(sample);
    const data::ShardFile file(m.shards[shard].path, nullptr);
    const int64_t R = m.resolution;
    tools::DarcyPanel panel;
    panel.height = panel.width = R;
    panel.permeability.resize(static_cast<size_t>(R * R));
    panel.pressure.resize(panel.permeability.size());
    file.read_window("permeability", row, 0, R, 0, R, panel.permeability.data(), R);
    file.read_window("darcy", row, 0, R, 0, R, panel.pressure.data(), R);

    const SafetensorsFile pred = load_safetensors(prediction_path);
    const Tensor t = pred.get(key).to(DType::f32).contiguous();
    int64_t start = 0;
    if (t.numel() != R * R) {
      SHARDRT_CHECK(t.dim() >= 1 && t.numel() == t.size(0) * R * R && prediction_sample >= 0 &&
                        prediction_sample < t.size(0),
                    ValueError, "shardrt-plot-darcy: '", key, "' in ", prediction_path, " is ", t.str(),
                    ": expected ", R, " x ", R, " values, or a stack of them with --prediction-sample in range");
      start = prediction_sample * R * R;
    }
    panel.prediction.assign(t.data<float>() + start, t.data<float>() + start + R * R);
    const double rel = tools::relative_l2(panel.prediction, panel.pressure);
    if (title.empty()) {
      std::ostringstream os;
      os << m.split << " sample " << sample << " (" << m.mode << ", " << R << "x" << R << "): relative L2 " << rel;
      title = os.str();
    }
    panel.title = title;
    tools::write_darcy_panel_png(out, panel, size);
    std::printf("%s: relative L2 %.4g\n", out.c_str(), rel);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardrt-plot-darcy: %s\n", e.what());
    return 1;
  }
  return 0;
}
