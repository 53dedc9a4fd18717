// The C++ objects behind the C API's handles, the tables that hold them, and the entry-point machinery every
// function of shardrt.h goes through: exceptions become a status and a thread-local message, and a collective call
// can agree on its outcome over the ranks before it returns.
#pragma once
#include <mpi.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "capi/agreement.h"
#include "capi/handles.h"
#include "capi/shardrt.h"
#include "mesh/ledger.h"
#include "mesh/mesh.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "patches/shard_tensor.h"

namespace shardrt::capi {

struct Context {
  std::unique_ptr<Agreement> agreement;  // over the caller's communicator (a duplicate of it)
  int flags = 0;
  bool initialised_mpi = false;   // this context called MPI_Init_thread (and the last such context finalises)
  // Set by shardrt_context_destroy: every object made from the context refuses further calls (SHARDRT_ERR_STATE)
  // but destroys; the objects keep what they hold alive until they are destroyed themselves.
  std::atomic<bool> closed{false};
  std::atomic<int64_t> copies{0}, copy_bytes{0};
  ~Context();
  bool agree_errors() const { return (flags & SHARDRT_AGREE_ERRORS) != 0; }
};

struct MeshObj {
  std::shared_ptr<Context> ctx;
  std::optional<Mesh> mesh;
  std::unique_ptr<Agreement> agreement;  // over the mesh's communicator: every collective call of its objects
  int ddp = 1, domain = 1;
  ~MeshObj();
  // A collective call of an object on this mesh (capi/agreement.h), with the context's agree_errors.
  void run(CallId id, const char* fn, const std::function<void(Signature&)>& prepare,
           const std::function<void()>& body) {
    agreement->run(id, fn, ctx->agree_errors(), prepare, body);
  }
};

struct TensorObj {
  std::shared_ptr<Context> ctx;
  Tensor view;                 // over the caller's memory, with the caller's strides
  bool copies_allowed = true;  // the resolved copy policy
  std::atomic<int64_t> copies{0}, copy_bytes{0};
  // Counts a copy of `bytes` of this tensor's memory, or throws CopyForbidden naming `why`.
  void note_copy(const char* fn, const std::string& why, int64_t bytes);
};

// One rank's piece of a global tensor, as the model sees it.
struct ShardedObj {
  std::shared_ptr<MeshObj> mesh;
  std::shared_ptr<TensorObj> tensor;
  Shape model_local_shape;    // tensor->view's shape, with dims 1..ndim-2 flattened for block decompositions
  bool flattened = false;
  bool needs_copy = false;    // the caller's strides do not allow the flattened view: a buffer stands between
  Tensor buffer;              // that buffer (model_local_shape, contiguous), when needs_copy
  std::optional<ShardSpec> spec;

  // The local tensor in the model's shape, holding the caller's current values, in `dtype` (a counted copy when
  // either the layout or the dtype differs).
  Tensor read(const char* fn, DType dtype);
  // Writes `local` (model_local_shape, any dtype) into the caller's memory.
  void write(const char* fn, const Tensor& local);
  // In checked mode, when this tensor is replicated over the domain group (every rank declared the whole sample
  // box): one all-gather of a digest of `values` (this rank's copy, as read) over the mesh, and a ValueError on
  // every rank naming `what` and the ranks of the first domain group whose copies differ. Collective.
  void check_replicated(const char* fn, const std::string& what, const Tensor& values) const;
};

struct ModelObj {
  std::shared_ptr<MeshObj> mesh;
  std::unique_ptr<models::Model> model;
  std::string kind;
  nlohmann::json config;
  std::optional<nlohmann::json> mdlus_args;  // from an .mdlus it was loaded from
  DType dtype = DType::f32;
  std::map<std::string, std::shared_ptr<ShardedObj>> inputs;
  // The last forward(record_grad = 1): its outputs and the input leaves whose grads backward fills.
  std::vector<ShardTensor> outputs;
  std::map<std::string, Tensor> input_leaves;
  bool backward_done = false;
  bool has_optimizer = false;
};

enum class LossKind { mse, relative_l2 };

struct OptimizerObj {
  std::shared_ptr<ModelObj> model;
  std::unique_ptr<optim::Optimizer> opt;
  LossKind loss = LossKind::mse;
};

inline const Context& context_of(const Context& c) { return c; }
inline const Context& context_of(const MeshObj& m) { return *m.ctx; }
inline const Context& context_of(const TensorObj& t) { return *t.ctx; }
inline const Context& context_of(const ShardedObj& s) { return *s.mesh->ctx; }
inline const Context& context_of(const ModelObj& m) { return *m.mesh->ctx; }
inline const Context& context_of(const OptimizerObj& o) { return *o.model->mesh->ctx; }

HandleTable<Context>& contexts();
HandleTable<MeshObj>& meshes();
HandleTable<TensorObj>& tensors();
HandleTable<ShardedObj>& shardeds();
HandleTable<ModelObj>& models_table();
HandleTable<OptimizerObj>& optimizers();

// ---- errors -----------------------------------------------------------------------------------------------------

// An outcome that already has its C status (agreed failures, copy refusals, null arguments).
struct CapiError {
  shardrt_status status;
  std::string message;
};

// The status and message of the exception being handled (called inside a catch block), the message prefixed with
// the entry point `fn`.
std::pair<shardrt_status, std::string> describe_current_exception(const char* fn);
// Records a failure as this thread's last error and returns its status.
shardrt_status set_error(shardrt_status status, const std::string& message);

// Runs an entry point's body: any exception becomes a status and the thread's last error.
shardrt_status entry(const char* fn, const std::function<void()>& body);

// CapiError(SHARDRT_ERR_STATE) naming `fn` when MPI is finalized or `ctx` was destroyed: what every call on a live
// handle checks first (destroys excepted).
void require_open(const Context& ctx, const char* fn);
// The object `id` names (InvalidHandle otherwise), after require_open on its context.
template <typename T>
std::shared_ptr<T> open_handle(HandleTable<T>& table, uint64_t id, const char* what, const char* fn) {
  std::shared_ptr<T> obj = table.get(id, what);
  require_open(context_of(*obj), fn);
  return obj;
}

// Throws CapiError(SHARDRT_ERR_NULL_ARGUMENT) naming `what` when p is null.
void require(const void* p, const char* fn, const char* what);

// The model's forward on its bound inputs (capi/model.cpp). `record`: keep the graph for backward; `input_grads`:
// make every floating input a leaf whose grad backward fills (shardrt_model_input_grad).
std::vector<ShardTensor> run_forward(ModelObj& m, const char* fn, bool record, bool input_grads);
// "embedding [2, 13, 2]; fx [2, 13, 3]": the names and global shapes of the bound inputs (part of the signature
// of the calls that run the model).
std::string bound_inputs(const ModelObj& m);

// ---- shared helpers -------------------------------------------------------------------------------------------

DType to_dtype(int dtype, const char* fn);  // SHARDRT_* -> DType; DTypeError for an unknown value
// A JSON object given inline ('{' first) or as a file path; `what` names it in errors.
nlohmann::json read_json_argument(const char* text, const char* fn, const char* what);

}  // namespace shardrt::capi
