#include "tools/plot_darcy.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/errors.h"

namespace shardrt::tools {
namespace {

void write_floats(const std::filesystem::path& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  SHARDRT_CHECK(out.good(), IoError, "write_darcy_panel_png: cannot write '", path.string(), "'");
}

// gnuplot single-quoted strings take everything literally except the quote itself, doubled.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

double relative_l2(const std::vector<float>& prediction, const std::vector<float>& truth) {
  SHARDRT_CHECK(prediction.size() == truth.size(), ValueError, "relative_l2: ", prediction.size(), " vs ",
                truth.size(), " values");
  double num = 0, den = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const double d = static_cast<double>(prediction[i]) - truth[i];
    num += d * d, den += static_cast<double>(truth[i]) * truth[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void write_darcy_panel_png(const std::string& png_path, const DarcyPanel& panel, PanelSize size) {
  const int64_t H = panel.height, W = panel.width;
  const size_t n = static_cast<size_t>(std::max<int64_t>(H, 0) * std::max<int64_t>(W, 0));
  SHARDRT_CHECK(H > 0 && W > 0 && panel.permeability.size() == n && panel.pressure.size() == n &&
                    panel.prediction.size() == n,
                ValueError, "write_darcy_panel_png: fields of ", panel.permeability.size(), ", ",
                panel.pressure.size(), ", ", panel.prediction.size(), " values for a ", H, " x ", W,
                " grid (permeability, pressure, prediction must each hold height * width)");
  SHARDRT_CHECK(size.width_px >= 200 && size.height_px >= 100, ValueError, "write_darcy_panel_png: ",
                size.width_px, " x ", size.height_px, " pixels is too small (at least 200 x 100)");
  std::vector<float> error(n);
  float emax = 0;
  for (size_t i = 0; i < n; ++i) {
    error[i] = panel.prediction[i] - panel.pressure[i];
    emax = std::max(emax, std::fabs(error[i]));
  }
  if (!(emax > 0)) emax = 1e-12f;  // a symmetric colour range even for a perfect prediction

  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("shardrt_plot_" + std::to_string(::getpid()) + "_" +
                                     std::to_string(reinterpret_cast<uintptr_t>(&panel)));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  write_floats(dir / "k.bin", panel.permeability);
  write_floats(dir / "p.bin", panel.pressure);
  write_floats(dir / "q.bin", panel.prediction);
  write_floats(dir / "e.bin", error);

  // Rows run down the page like an image (row 0 at the top); columns across.
  std::ostringstream g;
  g << "set terminal pngcairo size " << size.width_px << "," << size.height_px << " font 'sans,9'\n"
    << "set output " << quoted(png_path + ".tmp.png") << "\n"
    << "set multiplot layout 1,4 title " << quoted(panel.title) << "\n"
    << "unset key\nset size ratio -1\nunset xtics\nunset ytics\n"
    << "set xrange [-0.5:" << W - 0.5 << "]\nset yrange [" << H - 0.5 << ":-0.5]\n";
  const std::string array = " binary array=(" + std::to_string(W) + "," + std::to_string(H) + ") format='%float32'";
  auto plot = [&](const char* file, const char* title, const std::string& palette, const std::string& range) {
    g << "set title " << quoted(title) << "\nset palette " << palette << "\nset cbrange " << range << "\n"
      << "plot " << quoted((dir / file).string()) << array << " with image\n";
  };
  const std::string viridis = "defined (0 '#440154', 0.25 '#3b528b', 0.5 '#21918c', 0.75 '#5ec962', 1 '#fde725')";
  plot("k.bin", "permeability", viridis, "[*:*]");
  // True and predicted pressure share one colour range, so the eye compares like with like.
  float lo = panel.pressure[0], hi = panel.pressure[0];
  for (size_t i = 0; i < n; ++i) {
    lo = std::min({lo, panel.pressure[i], panel.prediction[i]});
    hi = std::max({hi, panel.pressure[i], panel.prediction[i]});
  }
  if (!(hi > lo)) hi = lo + 1e-12f;
  std::ostringstream pr;
  pr.precision(9);
  pr << "[" << lo << ":" << hi << "]";
  plot("p.bin", "pressure (true)", viridis, pr.str());
  plot("q.bin", "pressure (predicted)", viridis, pr.str());
  std::ostringstream er;
  er.precision(9);
  er << "[" << -emax << ":" << emax << "]";
  plot("e.bin", "error (predicted - true)", "defined (0 '#2166ac', 0.5 '#f7f7f7', 1 '#b2182b')", er.str());
  g << "unset multiplot\nset output\n";
  {
    std::ofstream script(dir / "panel.gp");
    script << g.str();
    SHARDRT_CHECK(script.good(), IoError, "write_darcy_panel_png: cannot write the gnuplot script in ", dir.string());
  }

  const char* env = std::getenv("SHARDRT_GNUPLOT");
  const std::string program = env && *env ? env : "gnuplot";
  const std::string command = program + " " + quoted((dir / "panel.gp").string()) + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  SHARDRT_CHECK(pipe != nullptr, IoError, "write_darcy_panel_png: cannot run '", program,
                "'; install gnuplot (Debian: gnuplot-nox; tools/setup does) or set SHARDRT_GNUPLOT");
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = ::pclose(pipe);
  std::error_code ec;
  const std::string tmp_png = png_path + ".tmp.png";
  if (status != 0 || !std::filesystem::exists(tmp_png)) {
    std::filesystem::remove(tmp_png, ec);
    throw IoError("write_darcy_panel_png: '" + program + "' failed (status " + std::to_string(status) +
                  ") writing " + png_path + (output.empty() ? "" : ": " + output) +
                  (status == 127 * 256 ? "; install gnuplot (Debian: gnuplot-nox) or set SHARDRT_GNUPLOT" : ""));
  }
  std::filesystem::rename(tmp_png, png_path, ec);
  SHARDRT_CHECK(!ec, IoError, "write_darcy_panel_png: cannot rename '", tmp_png, "' to '", png_path, "': ",
                ec.message());
}

}  // namespace shardrt::tools
