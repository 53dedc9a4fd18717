#include "tools/train_io.h"

#include "autograd/tape.h"
#include "models/geotransolver.h"
#include "models/vit.h"
#include "patches/ops.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::tools {

using data::DarcyBatch;
using data::FieldLayout;

data::LoaderOptions DarcyModelIO::loader_layout(data::LoaderOptions base, int64_t batch, int64_t height,
                                                int64_t width) const {
  base.layout = layout();
  if (model_.kind() == "geotransolver") {  // the loader's default: samples and rows (dim 1), split evenly
    base.placements = models::samples_and_domain(mesh_, 1), base.extents.clear();
    return base;
  }
  const Shape shape = data::batch_shape(base.layout, batch, height, width);
  const std::string name = model_.kind() == "vit" ? "x" : "fx";
  base.placements = model_.input_placements(name, shape, mesh_);
  base.extents = model_.input_extents(name, shape, mesh_);
  return base;
}

namespace {

class FlareIO : public DarcyModelIO {
 public:
  using DarcyModelIO::DarcyModelIO;
  FieldLayout layout() const override { return FieldLayout::channels_last; }
  std::map<std::string, ShardTensor> inputs(const DarcyBatch& b) const override { return {{"fx", b.permeability}}; }
  ShardTensor target(const DarcyBatch& b) const override { return b.darcy; }
};

class VitIO : public DarcyModelIO {
 public:
  using DarcyModelIO::DarcyModelIO;
  FieldLayout layout() const override { return FieldLayout::channels_first; }
  std::map<std::string, ShardTensor> inputs(const DarcyBatch& b) const override { return {{"x", b.permeability}}; }
  // The head's outputs are replicated over domain: so must the target be. One all_gather_v over domain of the
  // pressure rows per batch (ledger scope "redistribute"), no grad.
  ShardTensor target(const DarcyBatch& b) const override {
    NoGradGuard no_grad;
    Placements whole = b.darcy.placements();
    for (Placement& q : whole)
      if (q.is_shard() && q.dim != 0) q = Placement::Replicate();
    const ShardTensor gathered = redistribute(b.darcy, whole);
    const Shape& g = gathered.global_shape();  // (B, 1, R, R)
    return reshape(gathered, {g[0], g[2] * g[3]});
  }
};

class GeoTransolverIO : public DarcyModelIO {
 public:
  using DarcyModelIO::DarcyModelIO;
  FieldLayout layout() const override { return FieldLayout::channels_last; }

  std::map<std::string, ShardTensor> inputs(const DarcyBatch& b) const override {
    const Shape& g = b.permeability.global_shape();  // (B, R, R, 1)
    const int64_t rows = g[1], cols = g[2];
    const Tensor k = b.permeability.local().to(DType::f64).contiguous();  // (bs, hs, W, 1)
    const int64_t bs = k.size(0), hs = k.size(1);
    const int row_axis = b.permeability.spec().axis_sharding(1);
    const int64_t r0 = row_axis >= 0 ? b.permeability.spec().offset(row_axis) : 0;
    std::vector<double> emb(static_cast<size_t>(bs * hs * cols * 3)), geo(static_cast<size_t>(bs * hs * cols * 2));
    const double* kp = k.data<double>();
    const double sx = rows > 1 ? 1.0 / static_cast<double>(rows - 1) : 0.0;
    const double sy = cols > 1 ? 1.0 / static_cast<double>(cols - 1) : 0.0;
    for (int64_t s = 0; s < bs; ++s)
      for (int64_t i = 0; i < hs; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t p = (s * hs + i) * cols + j;
          const double x = static_cast<double>(r0 + i) * sx, y = static_cast<double>(j) * sy;
          emb[3 * p] = kp[p], emb[3 * p + 1] = x, emb[3 * p + 2] = y;
          geo[2 * p] = x, geo[2 * p + 1] = y;
        }
    const TensorOptions opt{b.permeability.dtype(), Device::cpu()};
    return {{"local_embedding", points(from_vector(emb, {bs, hs * cols, 3}, opt), b.permeability, cols)},
            {"geometry", points(from_vector(geo, {bs, hs * cols, 2}, opt), b.permeability, cols)}};
  }

  ShardTensor target(const DarcyBatch& b) const override {
    const Shape& g = b.darcy.global_shape();
    return reshape(b.darcy, {g[0], g[1] * g[2], 1});
  }

 private:
  // A local (bs, hs*W, C) tensor of this rank's rows as a ShardTensor of (B, R*R, C): the field's placements (the
  // rows' Shard(1) becomes the points' Shard(1)) and extents (rows times W).
  static ShardTensor points(const Tensor& local, const ShardTensor& field, int64_t cols) {
    const ShardSpec& spec = field.spec();
    AxisExtents extents = spec.all_extents();
    const int row_axis = spec.axis_sharding(1);
    if (row_axis >= 0)
      for (int64_t& e : extents[static_cast<size_t>(row_axis)]) e *= cols;
    return from_local(local, spec.mesh(), spec.placements(), extents);
  }
};

}  // namespace

std::unique_ptr<DarcyModelIO> darcy_model_io(const models::Model& model, const Mesh& mesh, int64_t height,
                                             int64_t width) {
  const std::string kind = model.kind();
  if (kind == "flare") return std::unique_ptr<DarcyModelIO>(new FlareIO(model, mesh));
  if (kind == "vit") {
    const auto& c = dynamic_cast<const models::HybridViT&>(model).config;
    const int64_t h = height, w = width;
    SHARDRT_CHECK(c.in_channels == 1, ValueError, "shardrt-train: vit on Darcy takes the permeability as a one-channel "
                  "image: set model.args.in_channels=1 (it is ", c.in_channels, ")");
    SHARDRT_CHECK(c.img_size.size() == 2 && c.img_size[0] == h && c.img_size[1] == w, ValueError,
                  "shardrt-train: vit on Darcy needs model.args.img_size=[", h, ", ", w, "] (the data is ", h, "x", w,
                  ")");
    SHARDRT_CHECK(c.num_classes == h * w, ValueError, "shardrt-train: vit on Darcy predicts the whole ", h, "x", w,
                  " pressure field from its head: set model.args.num_classes=", h * w, " (it is ", c.num_classes,
                  ")");
    return std::unique_ptr<DarcyModelIO>(new VitIO(model, mesh));
  }
  if (kind == "geotransolver") {
    const auto& c = dynamic_cast<const models::GeoTransolver&>(model).config();
    SHARDRT_CHECK(!c.tuple_streams && c.functional_dim.size() == 1 && c.functional_dim[0] == 3 &&
                      c.out_dim.size() == 1 && c.out_dim[0] == 1,
                  ValueError, "shardrt-train: geotransolver on Darcy takes (k, x, y) per grid point and predicts p: "
                  "set model.args.functional_dim=3 and out_dim=1");
    SHARDRT_CHECK(c.geometry_dim && *c.geometry_dim == 2 && !c.global_dim && !c.structured_shape, ValueError,
                  "shardrt-train: geotransolver on Darcy reads the grid as points with the (x, y) positions as its "
                  "geometry: set model.args.geometry_dim=2, and leave global_dim and structured_shape unset");
    return std::unique_ptr<DarcyModelIO>(new GeoTransolverIO(model, mesh));
  }
  throw ValueError("shardrt-train: no Darcy inputs are defined for model '" + kind + "'");
}

}  // namespace shardrt::tools
