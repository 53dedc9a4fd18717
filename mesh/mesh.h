// Mesh: the ranks of an MPI communicator arranged as a row-major grid of named axes. ShardRT's mesh is 2-D,
// ddp x domain, with mesh rank = ddp_index * domain + domain_index (the layout PhysicsNeMo gets from torch's
// init_device_mesh): a domain group is `domain` consecutive ranks, a ddp group is strided by `domain`.
//
// Each axis has a Communicator over the ranks that differ only in that axis' coordinate, and the flattened
// mesh has one named "mesh" (a 1-D mesh's flat communicator is its only axis). The communicator may be any
// sub-communicator: a simulation code can hand ShardRT only some of its ranks, and only those ranks construct
// the mesh.
//
// Construction is collective over `comm`. A shape that does not fit the communicator is a ValueError stating
// both sizes, raised on every rank before any communication. Each rank is bound to
// cuda:(node-local rank mod device count), or to the CPU when no GPU is visible.
//
// Every axis has a role (AxisRole). A *batch* axis (ddp) splits the batch: its ranks hold different samples, and
// the grads of parameters (plain replicated Tensors) are only this rank's contribution along it until the
// optimizer sums them, once (reduce_batch_grads in patches/batch_grads.h). A *domain* axis splits one sample's
// spatial or sequence dims: the patches sum parameter grads over it themselves. The 2-D constructor makes "ddp" a
// batch axis and "domain" a domain axis; the named-axes constructor without roles does the same by name (an axis
// named "ddp" is batch, every other axis domain), so both spellings of the same mesh mean the same thing.
//
// A Mesh is a handle: copies, and the sub-meshes of its axes, share the same communicators.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mesh/communicator.h"
#include "runtime/device.h"

namespace shardrt {

enum class AxisRole { batch, domain };
const char* axis_role_name(AxisRole role);  // "batch", "domain"

class Mesh {
 public:
  // 2-D ddp x domain; ddp = -1 infers it as size / domain.
  Mesh(MPI_Comm comm, int ddp, int domain, CommOptions opts = {});
  // Any named axes, row-major (the last varies fastest); at most one size may be -1 (inferred).
  Mesh(MPI_Comm comm, std::vector<std::string> axis_names, std::vector<int> shape, CommOptions opts = {});
  // The same with explicit roles, one per axis (a ValueError when the counts differ).
  Mesh(MPI_Comm comm, std::vector<std::string> axis_names, std::vector<int> shape, std::vector<AxisRole> roles,
       CommOptions opts = {});
  static Mesh one_d(MPI_Comm comm, const std::string& axis = "domain", CommOptions opts = {});
  // The 1-D mesh of one named axis: the ranks that differ from this one only in that axis' coordinate, ordered
  // by it (a 1-D mesh's only axis: the mesh itself), with that axis' role. It shares the axis' communicator —
  // the same ledger, timeout and failure policy, settings made through either mesh apply to both — and this rank's device, so no
  // communicator is duplicated. Collective over the axis' ranks, which count their node-local ranks again.
  Mesh sub(const std::string& axis) const;

  int ndim() const;
  const std::vector<std::string>& axis_names() const;
  const std::vector<int>& shape() const;
  int size() const;  // ranks in the mesh
  int rank() const;  // this rank's index in the flattened mesh (= its rank in the communicator)
  const std::vector<int>& coords() const;
  const std::vector<AxisRole>& axis_roles() const;
  AxisRole axis_role(int axis) const;  // by index into axis_names()
  bool is_batch_axis(int axis) const { return axis_role(axis) == AxisRole::batch; }
  int axis_index(const std::string& name) const;  // ValueError listing the axes when unknown
  int axis_size(const std::string& name) const;
  int coord(const std::string& name) const;
  Communicator& axis(const std::string& name) const;
  Communicator& flat() const;

  int local_rank() const;  // among the mesh's ranks on this node
  int local_size() const;
  Device device() const;  // the bound device: cuda:N or cpu

  // Apply to every communicator of the mesh.
  void set_timeout(double seconds) const;
  void set_failure_policy(FailurePolicy p) const;
  void set_ledger(std::shared_ptr<CommLedger> l) const;

  std::string str() const;  // "Mesh(ddp=2, domain=2)"

 private:
  struct Impl;
  explicit Mesh(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace shardrt
