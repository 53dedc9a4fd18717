#include "models/model.h"

#include <sstream>

#include "runtime/errors.h"

namespace shardrt::models {

SampleDomainAxes sample_domain_axes(const Mesh& mesh) {
  SampleDomainAxes a;
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (mesh.is_batch_axis(m) && a.batch < 0) a.batch = m;
    if (!mesh.is_batch_axis(m) && a.domain < 0) a.domain = m;
  }
  return a;
}

Placements samples_and_domain(const Mesh& mesh, int domain_dim) {
  Placements p(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
  const SampleDomainAxes a = sample_domain_axes(mesh);
  if (a.batch >= 0) p[static_cast<size_t>(a.batch)] = Placement::Shard(0);
  if (a.domain >= 0 && domain_dim >= 0) p[static_cast<size_t>(a.domain)] = Placement::Shard(domain_dim);
  return p;
}

void check_input_names(const Model& model, const std::map<std::string, ShardTensor>& inputs) {
  const std::vector<ModelInput> known = model.inputs();
  std::ostringstream list;
  for (const ModelInput& in : known) list << " " << in.name << (in.required ? "" : " (optional)");
  for (const auto& [name, t] : inputs) {
    bool found = false;
    for (const ModelInput& in : known) found |= in.name == name;
    SHARDRT_CHECK(found, ValueError, model.kind(), ": unknown input '", name, "'; its inputs are", list.str());
  }
  for (const ModelInput& in : known)
    SHARDRT_CHECK(!in.required || inputs.count(in.name), ValueError, model.kind(), ": the required input '", in.name,
                  "' ", in.shape, " is missing; its inputs are", list.str());
  // A floating input in another dtype than the parameters would fail deep inside the first op that meets both
  // ("conv: dtypes differ"); say so here, in the model's words. (Undefined entries are name-only probes.)
  const std::vector<Tensor> params = model.parameters();
  if (params.empty()) return;
  const DType want = params.front().dtype();
  for (const auto& [name, t] : inputs) {
    if (!t.defined() || !is_floating(t.dtype())) continue;
    SHARDRT_CHECK(t.dtype() == want, DTypeError, model.kind(), ": input '", name, "' ", shape_str(t.global_shape()),
                  " is ", dtype_name(t.dtype()), " but the model's parameters are ", dtype_name(want),
                  "; convert the input to ", dtype_name(want), " (or build the model in ", dtype_name(t.dtype()), ")");
  }
}

}  // namespace shardrt::models
