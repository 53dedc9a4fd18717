// Model: a bundled PhysicsNeMo model (ViT, FLARE, …) as a Module tree with a forward over named inputs, and the
// registry that builds one by name from a JSON config of PhysicsNeMo's constructor arguments.
//
// One code path for 1 rank and N ranks: forward takes ShardTensors, and their placements decide what runs (models
// never call a collective; the patches they call do). input_placements says how a caller that holds the whole
// input (shardrt-infer, the tests) should lay it out on a mesh: samples over the batch axes, the sharded axis of
// the model (tokens' image rows, points) over the domain axes.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/module.h"
#include "patches/shard_tensor.h"

namespace shardrt::models {

struct ModelInput {
  std::string name;          // PhysicsNeMo's forward argument name (x; fx, embedding, time; …)
  std::string shape;         // for --help and errors, e.g. "(B, C_in, H, W)"
  bool required = true;
};

struct ModelOptions {
  DType dtype = DType::f32;  // of parameters and buffers
  uint64_t seed = 0;         // of the initialisation
};

class Model : public Module {
 public:
  // The registry name ("vit", "flare").
  virtual std::string kind() const = 0;
  virtual std::vector<ModelInput> inputs() const = 0;
  // How the whole input `name` of `global_shape` is best laid out on `mesh`.
  virtual Placements input_placements(const std::string& name, const Shape& global_shape, const Mesh& mesh) const = 0;
  // The extents of those placements (one vector per mesh axis, as in ShardSpec); empty: split_extents. A model whose
  // sharded dim has to split in multiples (the ViT's image rows: whole patches per rank) overrides it.
  virtual AxisExtents input_extents(const std::string& name, const Shape& global_shape, const Mesh& mesh) const {
    (void)name, (void)global_shape, (void)mesh;
    return {};
  }
  // Inputs by name (optional ones may be absent); a missing, unknown or ill-shaped input is a ValueError or
  // ShapeError naming it, raised from the global shapes (the same on every rank). Returns the outputs (one for
  // both bundled models).
  virtual std::vector<ShardTensor> forward(const std::map<std::string, ShardTensor>& inputs) = 0;
};

using ModelBuilder = std::unique_ptr<Model> (*)(const Json& config, const ModelOptions& options);

// Builds model `name` ("vit", "flare") from `config` (constructor arguments; unknown or ill-typed keys are a
// ValueError naming the key); an unknown name is a ValueError listing the known ones.
std::unique_ptr<Model> build_model(const std::string& name, const Json& config, const ModelOptions& options = {});
std::vector<std::string> model_names();

// The layout bundled models give their inputs: the samples (dim 0) over the first batch axis of `mesh`, dim
// `domain_dim` (the points, or the image rows; -1 for none) over its first domain axis. A dim is sharded by one axis
// at most, so further axes of either role replicate.
Placements samples_and_domain(const Mesh& mesh, int domain_dim);
// The two axes samples_and_domain uses (-1 where the mesh has no axis of that role), for models that also choose
// the extents.
struct SampleDomainAxes {
  int batch = -1, domain = -1;
};
SampleDomainAxes sample_domain_axes(const Mesh& mesh);

// Checks that `inputs` holds exactly the model's inputs: each required one present, none unknown (ValueError naming
// the name and the model's inputs), and that every defined floating input has the parameters' dtype (DTypeError
// naming the model, the input and both dtypes).
void check_input_names(const Model& model, const std::map<std::string, ShardTensor>& inputs);

}  // namespace shardrt::models
