// The Darcy panel: permeability, true pressure, predicted pressure and their difference for one sample, side by
// side in one PNG, drawn by gnuplot (its pngcairo terminal) from a script and binary data files written to a
// temporary folder. gnuplot is a Debian package (gnuplot-nox; tools/setup installs it); the program run is
// $SHARDRT_GNUPLOT when set, else `gnuplot` on the PATH.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardrt::tools {

struct DarcyPanel {
  int64_t height = 0, width = 0;               // the fields are row-major height x width
  std::vector<float> permeability, pressure, prediction;
  std::string title;                           // above the four plots (e.g. "validation sample 3, rel. L2 0.041")
};

struct PanelSize {
  int width_px = 1600, height_px = 420;
};

// Writes the panel to `png_path` (replacing it). ValueError for fields of the wrong size or a size under 200 x 100
// pixels; IoError when gnuplot cannot be run or fails (its output quoted) or leaves no PNG behind.
void write_darcy_panel_png(const std::string& png_path, const DarcyPanel& panel, PanelSize size = {});

// The relative L2 error ||prediction - pressure|| / ||pressure|| of a panel (for its title).
double relative_l2(const std::vector<float>& prediction, const std::vector<float>& truth);

}  // namespace shardrt::tools
