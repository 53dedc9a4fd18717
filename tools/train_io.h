// How each bundled model meets the Darcy data in shardrt-train: which layout the loader reads, the model's named
// inputs built from a batch, and the target in the layout of the model's output.
//
//   flare          fx = permeability (B, R, R, 1), rows over domain (unified_pos supplies the positions); the output
//                  (B, R, R, 1) is compared with the pressure as it is.
//   vit            x = permeability as a one-channel image (B, 1, R, R), whole patch rows over domain; the head's
//                  num_classes = R*R outputs are the whole pressure field (B, R*R), replicated over domain, so the
//                  target is the pressure gathered over domain (no grad: it is data) and flattened.
//   geotransolver  the grid as a point cloud, flattened in row order so each rank keeps its rows: local_embedding
//                  (B, R*R, 3) = (k, x, y) and geometry (B, R*R, 2) = (x, y), x = row / (R-1), y = column / (R-1)
//                  (built locally from the rank's rows; no data moves); the output (B, R*R, 1) against the pressure
//                  flattened the same way.
// Every output holds B*R*R values in grid order, so validation and the panel treat the three alike.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "data/loader.h"
#include "models/model.h"

namespace shardrt::tools {

class DarcyModelIO {
 public:
  virtual ~DarcyModelIO() = default;
  // The loader's layout, placements and extents of both fields for a batch of `batch` samples of H x W.
  virtual data::FieldLayout layout() const = 0;
  data::LoaderOptions loader_layout(data::LoaderOptions base, int64_t batch, int64_t height, int64_t width) const;
  virtual std::map<std::string, ShardTensor> inputs(const data::DarcyBatch& b) const = 0;
  virtual ShardTensor target(const data::DarcyBatch& b) const = 0;
  DarcyModelIO(const models::Model& model, const Mesh& mesh) : model_(model), mesh_(mesh) {}

 protected:
  const models::Model& model_;
  Mesh mesh_;
};

// For model.kind() on H x W fields; a model whose configuration does not fit them (a ViT whose num_classes is not
// H*W, in_channels not 1, img_size not [H, W]; a GeoTransolver whose functional_dim is not 3 or geometry_dim not 2)
// is a ValueError saying which argument to set.
std::unique_ptr<DarcyModelIO> darcy_model_io(const models::Model& model, const Mesh& mesh, int64_t height,
                                             int64_t width);

}  // namespace shardrt::tools
