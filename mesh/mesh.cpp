#include "mesh/mesh.h"

#include <algorithm>
#include <cstdint>

#include "mesh/device_binding.h"
#include "mesh/guarded_call.h"
#include "mesh/mpi_call.h"
#include "runtime/errors.h"

namespace shardrt {

struct Mesh::Impl {
  std::vector<std::string> names;
  std::vector<int> shape;
  std::vector<AxisRole> roles;
  std::vector<int> coords;
  int rank = 0;
  int size = 1;
  NodeLocal local;
  Device device;
  std::vector<std::shared_ptr<Communicator>> axes;  // shared with the sub-meshes of the axes
  std::unique_ptr<Communicator> flat;  // null for a 1-D mesh (its axis is the flat communicator)
};

namespace {

std::string describe(const std::vector<std::string>& names, const std::vector<int>& shape) {
  std::string s = "Mesh(";
  for (std::size_t i = 0; i < names.size() && i < shape.size(); ++i)
    s += (i ? ", " : "") + names[i] + "=" + std::to_string(shape[i]);
  return s + ")";
}

std::string product_str(const std::vector<int>& shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

// Checks names and sizes and fills in an inferred (-1) size. Local only: every rank reaches the same verdict
// from the same arguments and the communicator size, so a bad shape fails everywhere before any collective.
void resolve_shape(const std::vector<std::string>& names, std::vector<int>& shape, int comm_size) {
  const std::string desc = describe(names, shape);
  SHARDRT_CHECK(!names.empty() && names.size() == shape.size(), ValueError, desc, ": ", names.size(),
                " axis names for ", shape.size(), " sizes");
  for (std::size_t i = 0; i < names.size(); ++i) {
    SHARDRT_CHECK(!names[i].empty(), ValueError, desc, ": axis ", i, " has an empty name");
    SHARDRT_CHECK(names.size() == 1 || names[i] != "mesh", ValueError, desc,
                  ": 'mesh' names the flattened mesh and cannot name an axis");
    for (std::size_t j = 0; j < i; ++j)
      SHARDRT_CHECK(names[i] != names[j], ValueError, desc, ": axis name '", names[i], "' is repeated");
  }
  int inferred = -1;
  int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      SHARDRT_CHECK(inferred < 0, ValueError, desc, ": at most one axis size may be -1 (inferred)");
      inferred = static_cast<int>(i);
      continue;
    }
    SHARDRT_CHECK(shape[i] >= 1, ValueError, desc, ": axis '", names[i], "' has size ", shape[i],
                  "; sizes are >= 1, or -1 to infer one");
    known *= shape[i];
  }
  if (inferred >= 0) {
    SHARDRT_CHECK(comm_size % known == 0, ValueError, desc, ": the communicator has ", comm_size,
                  " ranks, not a multiple of ", known, ", so the size of axis '", names[inferred],
                  "' cannot be inferred");
    shape[inferred] = static_cast<int>(comm_size / known);
    return;
  }
  SHARDRT_CHECK(known == comm_size, ValueError, desc, " needs ", product_str(shape), " = ", known,
                " ranks, but the communicator has ", comm_size);
}

// The roles of a mesh built without explicit ones: "ddp" is the batch axis, every other axis a domain axis.
std::vector<AxisRole> roles_by_name(const std::vector<std::string>& names) {
  std::vector<AxisRole> roles;
  for (const std::string& n : names) roles.push_back(n == "ddp" ? AxisRole::batch : AxisRole::domain);
  return roles;
}

}  // namespace

const char* axis_role_name(AxisRole role) { return role == AxisRole::batch ? "batch" : "domain"; }

Mesh::Mesh(MPI_Comm comm, int ddp, int domain, CommOptions opts)
    : Mesh(comm, {"ddp", "domain"}, {ddp, domain}, std::move(opts)) {}

Mesh Mesh::one_d(MPI_Comm comm, const std::string& axis, CommOptions opts) {
  return Mesh(comm, std::vector<std::string>{axis}, std::vector<int>{-1}, std::move(opts));
}

Mesh::Mesh(MPI_Comm comm, std::vector<std::string> axis_names, std::vector<int> shape, CommOptions opts)
    : Mesh(comm, axis_names, std::move(shape), roles_by_name(axis_names), std::move(opts)) {}

Mesh::Mesh(MPI_Comm comm, std::vector<std::string> axis_names, std::vector<int> shape, std::vector<AxisRole> roles,
           CommOptions opts)
    : impl_(std::make_shared<Impl>()) {
  SHARDRT_CHECK(roles.size() == axis_names.size(), ValueError, describe(axis_names, shape), ": ", roles.size(),
                " axis roles for ", axis_names.size(), " axes");
  int initialized = 0;
  MPI_Initialized(&initialized);
  SHARDRT_CHECK(initialized, ValueError, describe(axis_names, shape), ": MPI is not initialised");
  SHARDRT_CHECK(comm != MPI_COMM_NULL, ValueError, describe(axis_names, shape),
                ": MPI_COMM_NULL given (ranks outside a sub-communicator do not construct its mesh)");
  Impl& m = *impl_;
  {
    ErrorsReturnScope errors_return(comm);
    check_mpi(MPI_Comm_size(comm, &m.size), "MPI_Comm_size", describe(axis_names, shape));
    check_mpi(MPI_Comm_rank(comm, &m.rank), "MPI_Comm_rank", describe(axis_names, shape));
  }
  resolve_shape(axis_names, shape, m.size);
  m.names = std::move(axis_names);
  m.shape = std::move(shape);
  m.roles = std::move(roles);
  if (error_rank() < 0) {
    int world_rank = 0, world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    if (world_size > 1) set_error_rank(world_rank);
  }

  const int nd = static_cast<int>(m.shape.size());
  m.coords.assign(nd, 0);
  for (int a = nd - 1, rest = m.rank; a >= 0; --a) {  // row-major: the last axis varies fastest
    m.coords[a] = rest % m.shape[a];
    rest /= m.shape[a];
  }

  // The set-up calls below that have no non-blocking form meet under the deadline first (mesh/guarded_call.h).
  const GuardContext guard{describe(m.names, m.shape), opts.timeout_s, opts.failure};
  m.local = node_local(comm, guard);
  m.device = opts.cuda_device >= 0                     ? Device::cuda(opts.cuda_device)
             : opts.cuda_device == CommOptions::no_gpu ? Device::cpu()
                                                       : bound_device(m.local.rank);
  opts.cuda_device = m.device.is_cuda() ? m.device.index : CommOptions::no_gpu;

  if (nd == 1) {
    m.axes.push_back(std::make_shared<Communicator>(comm, m.names[0], opts));
    return;
  }
  for (int a = 0; a < nd; ++a) {
    // Ranks that agree on every other coordinate form this axis' group, ordered by their coordinate on it.
    int color = 0;
    for (int i = 0; i < nd; ++i)
      if (i != a) color = color * m.shape[i] + m.coords[i];
    MPI_Comm sub = MPI_COMM_NULL;
    {
      ErrorsReturnScope errors_return(comm);
      const std::string call = "MPI_Comm_split on axis '" + m.names[a] + "'";
      check_mpi(guarded_mpi_call(comm, guard, call, [&] { return MPI_Comm_split(comm, color, m.coords[a], &sub); }),
                call.c_str(), guard.who);
    }
    // The split is only the parent of the axis' own duplicate; its errors must not be fatal either.
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    std::shared_ptr<Communicator> axis;
    try {
      axis = std::make_shared<Communicator>(sub, m.names[a], opts);
    } catch (...) {
      MPI_Comm_free(&sub);
      throw;
    }
    MPI_Comm_free(&sub);
    m.axes.push_back(std::move(axis));
  }
  m.flat = std::make_unique<Communicator>(comm, "mesh", opts);
}

int Mesh::ndim() const { return static_cast<int>(impl_->shape.size()); }
const std::vector<std::string>& Mesh::axis_names() const { return impl_->names; }
const std::vector<int>& Mesh::shape() const { return impl_->shape; }
int Mesh::size() const { return impl_->size; }
int Mesh::rank() const { return impl_->rank; }
const std::vector<int>& Mesh::coords() const { return impl_->coords; }
const std::vector<AxisRole>& Mesh::axis_roles() const { return impl_->roles; }
AxisRole Mesh::axis_role(int axis) const {
  SHARDRT_CHECK(axis >= 0 && axis < ndim(), ValueError, str(), ": axis index ", axis, " out of range");
  return impl_->roles[axis];
}
int Mesh::local_rank() const { return impl_->local.rank; }
int Mesh::local_size() const { return impl_->local.size; }
Device Mesh::device() const { return impl_->device; }

int Mesh::axis_index(const std::string& name) const {
  const auto& n = impl_->names;
  auto it = std::find(n.begin(), n.end(), name);
  SHARDRT_CHECK(it != n.end(), ValueError, str(), ": no axis named '", name, "'");
  return static_cast<int>(it - n.begin());
}
int Mesh::axis_size(const std::string& name) const { return impl_->shape[axis_index(name)]; }
int Mesh::coord(const std::string& name) const { return impl_->coords[axis_index(name)]; }
Communicator& Mesh::axis(const std::string& name) const { return *impl_->axes[axis_index(name)]; }
Mesh Mesh::sub(const std::string& axis) const {
  const int a = axis_index(axis);
  if (ndim() == 1) return *this;
  auto impl = std::make_shared<Impl>();
  Impl& m = *impl;
  const std::shared_ptr<Communicator>& comm = impl_->axes[a];
  m.names = {axis};
  m.shape = {impl_->shape[a]};
  m.roles = {impl_->roles[a]};
  m.coords = {impl_->coords[a]};
  m.rank = comm->rank();
  m.size = comm->size();
  m.local = node_local(comm->mpi_comm(), {str() + ".sub('" + axis + "')", comm->timeout(), comm->failure_policy()});
  m.device = impl_->device;
  m.axes = {comm};
  return Mesh(std::move(impl));
}

Communicator& Mesh::flat() const { return impl_->flat ? *impl_->flat : *impl_->axes[0]; }

void Mesh::set_timeout(double seconds) const {
  for (auto& c : impl_->axes) c->set_timeout(seconds);
  if (impl_->flat) impl_->flat->set_timeout(seconds);
}
void Mesh::set_failure_policy(FailurePolicy p) const {
  for (auto& c : impl_->axes) c->set_failure_policy(p);
  if (impl_->flat) impl_->flat->set_failure_policy(p);
}
void Mesh::set_ledger(std::shared_ptr<CommLedger> l) const {
  for (auto& c : impl_->axes) c->set_ledger(l);
  if (impl_->flat) impl_->flat->set_ledger(l);
}

std::string Mesh::str() const { return describe(impl_->names, impl_->shape); }

}  // namespace shardrt
