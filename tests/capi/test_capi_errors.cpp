// The C API's bad-input table: every wrong call returns its documented status with a message naming the call, on
// every rank, and none crashes or hangs (the suite also runs under ASan: tools/test --sanitize).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/capi/capi_fixture.h"
#include "tests/support/world.h"

using namespace shardrt;
using namespace shardrt::capi_test;

namespace {

struct BadCall {
  std::string what;
  shardrt_status expected;
  std::function<shardrt_status()> call;
  std::string message_part;  // a word the message must hold ("" : just the function's name)
  bool same_message = false;  // the message too is the same on every rank (an agreed failure)
};

// Whether `msg` is the same on every rank.
bool same_everywhere(const std::string& msg) {
  const long long h = static_cast<long long>(std::hash<std::string>{}(msg) >> 1);
  long long lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

std::string golden(const std::string& file) { return std::string(SHARDRT_TEST_DATA_DIR) + "/golden/" + file; }

}  // namespace

TEST_CASE("capi: the bad-input table (>= 40 wrong calls): each returns its documented status with a message, on "
          "every rank alike", "[capi]") {
  const int P = world_size(), rank = world_rank();
  Session s(SHARDRT_AGREE_ERRORS | SHARDRT_CHECKED);
  Piece fx(s, 1, 9, 3, fx_value), emb(s, 1, 9, 2, emb_value), out(s, 1, 9, 2), target(s, 1, 9, 2, target_value);
  Piece wrong_out(s, 1, 9, 3), wrong_fx(s, 1, 9, 4, fx_value);
  shardrt_model model{0};
  CAPI_OK(shardrt_model_create(&model, s.mesh, "flare", flare_config(), nullptr, SHARDRT_F64, 1));
  shardrt_model fresh{0};  // no input bound, never run
  CAPI_OK(shardrt_model_create(&fresh, s.mesh, "flare", flare_config(), nullptr, SHARDRT_F64, 1));
  shardrt_optimizer opt{0};
  CAPI_OK(shardrt_optimizer_create(&opt, model, "{}"));
  Session other;  // another mesh over the same ranks
  Piece fx_other(other, 1, 9, 3, fx_value);

  // Handles that once existed.
  shardrt_context dead_ctx{0};
  CAPI_OK(shardrt_context_create(&dead_ctx, MPI_COMM_WORLD, 0));
  CAPI_OK(shardrt_context_destroy(dead_ctx));
  double scratch[64] = {0};
  const int64_t shape2[2] = {2, 3};
  shardrt_tensor dead_tensor{0};
  CAPI_OK(shardrt_tensor_wrap(&dead_tensor, s.ctx, scratch, SHARDRT_F64, 2, shape2, nullptr, SHARDRT_LAYOUT_ROW_MAJOR,
                              SHARDRT_DEVICE_CPU, 0));
  CAPI_OK(shardrt_tensor_destroy(dead_tensor));
  shardrt_optimizer dead_opt{0};
  {
    shardrt_model m{0};
    CAPI_OK(shardrt_model_create(&m, s.mesh, "flare", flare_config(), nullptr, SHARDRT_F64, 2));
    CAPI_OK(shardrt_optimizer_create(&dead_opt, m, "{}"));
    CAPI_OK(shardrt_optimizer_destroy(dead_opt));
    CAPI_OK(shardrt_model_destroy(m));
  }
  shardrt_tensor t23{0};  // a valid 2 x 3 tensor
  CAPI_OK(shardrt_tensor_wrap(&t23, s.ctx, scratch, SHARDRT_F64, 2, shape2, nullptr, SHARDRT_LAYOUT_ROW_MAJOR,
                              SHARDRT_DEVICE_CPU, 0));
  // Replicated pieces: a class output (1, 7) and a part (1, 5) of one; a time value (1,) and a zero box of it,
  // and a time that differs on every rank, for a FLARE with time_input.
  double out17[7] = {0}, out15[5] = {0}, time_here[1] = {0.5 + rank};
  const int64_t shape17[2] = {1, 7}, shape15[2] = {1, 5}, one[1] = {1}, none[1] = {0}, zero_off[1] = {0};
  shardrt_tensor t17{0}, t15{0}, t1{0}, t0{0};
  CAPI_OK(shardrt_tensor_wrap(&t17, s.ctx, out17, SHARDRT_F64, 2, shape17, nullptr, 0, SHARDRT_DEVICE_CPU, 0));
  CAPI_OK(shardrt_tensor_wrap(&t15, s.ctx, out15, SHARDRT_F64, 2, shape15, nullptr, 0, SHARDRT_DEVICE_CPU, 0));
  CAPI_OK(shardrt_tensor_wrap(&t1, s.ctx, time_here, SHARDRT_F64, 1, one, nullptr, 0, SHARDRT_DEVICE_CPU, 0));
  CAPI_OK(shardrt_tensor_wrap(&t0, s.ctx, nullptr, SHARDRT_F64, 1, none, nullptr, 0, SHARDRT_DEVICE_CPU, 0));
  shardrt_sharded time_differs{0};
  CAPI_OK(shardrt_sharded_create(&time_differs, s.mesh, t1, 1, one, zero_off));
  shardrt_model timed{0};
  CAPI_OK(shardrt_model_create(&timed, s.mesh, "flare", R"({"functional_dim": 3, "out_dim": 2, "embedding_dim": 2,
      "n_layers": 1, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4, "time_input": true})", nullptr,
                               SHARDRT_F64, 1));
  // This rank's point range of N = 9 (as Piece lays it out).
  const int64_t n = fx.n, off = fx.offset;

  auto wrap = [&](void* data, int dtype, int ndim, const int64_t* shape, const int64_t* strides, int layout,
                  int device, int flags) {
    shardrt_tensor t{0};
    const shardrt_status st = shardrt_tensor_wrap(&t, s.ctx, data, dtype, ndim, shape, strides, layout, device, flags);
    if (t.id) shardrt_tensor_destroy(t);  // keeps the failed call's error as the last one
    return st;
  };
  auto sharded = [&](shardrt_tensor local, int ndim, std::vector<int64_t> global, std::vector<int64_t> offsets,
                     bool points = false) {
    shardrt_sharded x{0};
    const shardrt_status st =
        points ? shardrt_sharded_create_points(&x, s.mesh, local, ndim, global.data(), offsets.data())
               : shardrt_sharded_create(&x, s.mesh, local, ndim, global.data(), offsets.data());
    if (x.id) shardrt_sharded_destroy(x);
    return st;
  };
  auto create = [&](const char* kind, const char* config, const char* weights, int dtype) {
    shardrt_model m{0};
    const shardrt_status st =
        shardrt_model_create(&m, s.mesh, kind, config, weights, dtype, 0);
    if (m.id) shardrt_model_destroy(m);
    return st;
  };
  auto optimizer = [&](const char* config) {
    shardrt_model m{0};
    CAPI_OK(shardrt_model_create(&m, s.mesh, "flare", flare_config(), nullptr, SHARDRT_F64, 0));
    shardrt_optimizer o{0};
    const shardrt_status st = shardrt_optimizer_create(&o, m, config);
    if (o.id) shardrt_optimizer_destroy(o);
    if (m.id) shardrt_model_destroy(m);
    return st;
  };

  std::vector<BadCall> table = {
      // ---- contexts and meshes
      {"context: out is NULL", SHARDRT_ERR_NULL_ARGUMENT,
       [&] { return shardrt_context_create(nullptr, MPI_COMM_WORLD, 0); }, "out"},
      {"context: MPI_COMM_NULL", SHARDRT_ERR_VALUE,
       [&] { shardrt_context c{0}; return shardrt_context_create(&c, MPI_COMM_NULL, 0); }, "MPI_COMM_NULL"},
      {"context: unknown flag bits", SHARDRT_ERR_VALUE,
       [&] { shardrt_context c{0}; return shardrt_context_create(&c, MPI_COMM_WORLD, 64); }, "flags"},
      {"context: the null handle destroyed", SHARDRT_ERR_INVALID_HANDLE,
       [&] { return shardrt_context_destroy(shardrt_context{0}); }, "null"},
      {"context: destroyed twice", SHARDRT_ERR_INVALID_HANDLE, [&] { return shardrt_context_destroy(dead_ctx); },
       "destroyed"},
      {"mesh: a destroyed context", SHARDRT_ERR_INVALID_HANDLE,
       [&] { shardrt_mesh m{0}; return shardrt_mesh_create(&m, dead_ctx, MPI_COMM_WORLD, 1, P, -1); }, "destroyed"},
      {"mesh: ddp x domain does not fit the communicator", SHARDRT_ERR_VALUE,
       [&] { shardrt_mesh m{0}; return shardrt_mesh_create(&m, s.ctx, MPI_COMM_WORLD, 1, P + 1, -1); }, ""},
      {"mesh: domain 0", SHARDRT_ERR_VALUE,
       [&] { shardrt_mesh m{0}; return shardrt_mesh_create(&m, s.ctx, MPI_COMM_WORLD, 1, 0, -1); }, "domain"},
      {"mesh: device -7", SHARDRT_ERR_VALUE,
       [&] { shardrt_mesh m{0}; return shardrt_mesh_create(&m, s.ctx, MPI_COMM_WORLD, 1, P, -7); }, "device"},
      {"mesh: a GPU this machine lacks", SHARDRT_ERR_DEVICE,
       [&] { shardrt_mesh m{0}; return shardrt_mesh_create(&m, s.ctx, MPI_COMM_WORLD, 1, P, 64); }, "cuda:64"},
      {"mesh: Fortran MPI_COMM_NULL", SHARDRT_ERR_VALUE,
       [&] {
         shardrt_mesh m{0};
         return shardrt_mesh_create_f(&m, s.ctx, MPI_Comm_c2f(MPI_COMM_NULL), 1, P, -1);
       }, "MPI_COMM_NULL"},
      {"mesh: info of the null handle", SHARDRT_ERR_INVALID_HANDLE,
       [&] { return shardrt_mesh_info(shardrt_mesh{0}, nullptr, nullptr, nullptr, nullptr); }, "null"},
      {"mesh: a model handle passed as a mesh", SHARDRT_ERR_INVALID_HANDLE,
       [&] { return shardrt_mesh_comm_counts(shardrt_mesh{model.id}, nullptr, nullptr, nullptr); }, "model handle"},
      // ---- tensors
      {"wrap: out is NULL", SHARDRT_ERR_NULL_ARGUMENT,
       [&] { return shardrt_tensor_wrap(nullptr, s.ctx, scratch, SHARDRT_F64, 2, shape2, nullptr, SHARDRT_LAYOUT_ROW_MAJOR, -1, 0); },
       "out"},
      {"wrap: dtype 99", SHARDRT_ERR_DTYPE, [&] { return wrap(scratch, 99, 2, shape2, nullptr, 0, -1, 0); }, "dtype 99"},
      {"wrap: 9 dims", SHARDRT_ERR_SHAPE,
       [&] { const int64_t sh[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}; return wrap(scratch, SHARDRT_F64, 9, sh, nullptr, 0, -1, 0); },
       "ndim 9"},
      {"wrap: negative ndim", SHARDRT_ERR_SHAPE, [&] { return wrap(scratch, SHARDRT_F64, -1, shape2, nullptr, 0, -1, 0); },
       "ndim -1"},
      {"wrap: a negative extent", SHARDRT_ERR_SHAPE,
       [&] { const int64_t sh[2] = {2, -3}; return wrap(scratch, SHARDRT_F64, 2, sh, nullptr, 0, -1, 0); }, "negative"},
      {"wrap: shape NULL", SHARDRT_ERR_NULL_ARGUMENT, [&] { return wrap(scratch, SHARDRT_F64, 2, nullptr, nullptr, 0, -1, 0); },
       "shape"},
      {"wrap: data NULL with elements", SHARDRT_ERR_NULL_ARGUMENT,
       [&] { return wrap(nullptr, SHARDRT_F64, 2, shape2, nullptr, 0, -1, 0); }, "data"},
      {"wrap: strides that overlap", SHARDRT_ERR_SHAPE,
       [&] { const int64_t st[2] = {1, 1}; return wrap(scratch, SHARDRT_F64, 2, shape2, st, 0, -1, 0); }, "overlap"},
      {"wrap: strides that overlap (rows closer than a row)", SHARDRT_ERR_SHAPE,
       [&] { const int64_t st[2] = {2, 1}; return wrap(scratch, SHARDRT_F64, 2, shape2, st, 0, -1, 0); }, "overlap"},
      {"wrap: stride 0 on an extent of 3", SHARDRT_ERR_SHAPE,
       [&] { const int64_t st[2] = {3, 0}; return wrap(scratch, SHARDRT_F64, 2, shape2, st, 0, -1, 0); }, "stride 0"},
      {"wrap: a negative stride", SHARDRT_ERR_SHAPE,
       [&] { const int64_t st[2] = {3, -1}; return wrap(scratch, SHARDRT_F64, 2, shape2, st, 0, -1, 0); }, "negative"},
      // Found by the capi fuzz target: the span of a stride of 2^62 over 3 elements overflowed int64 (UB).
      {"wrap: strides whose span overflows", SHARDRT_ERR_SHAPE,
       [&] { const int64_t st[2] = {int64_t{1} << 62, 1}; return wrap(scratch, SHARDRT_F64, 2, shape2, st, 0, -1, 0); },
       "2^63"},
      {"wrap: extents whose default strides overflow", SHARDRT_ERR_SHAPE,
       [&] { const int64_t sh[3] = {0, int64_t{1} << 62, 8}; return wrap(scratch, SHARDRT_F64, 3, sh, nullptr, 0, -1, 0); },
       "2^63"},
      {"wrap: layout 5", SHARDRT_ERR_VALUE, [&] { return wrap(scratch, SHARDRT_F64, 2, shape2, nullptr, 5, -1, 0); },
       "layout"},
      {"wrap: copy flags 9", SHARDRT_ERR_VALUE, [&] { return wrap(scratch, SHARDRT_F64, 2, shape2, nullptr, 0, -1, 9); },
       "flags"},
      {"wrap: host memory declared as a GPU's", SHARDRT_ERR_DEVICE,
       [&] { return wrap(scratch, SHARDRT_F64, 2, shape2, nullptr, 0, 0, 0); }, "cuda:0"},
      {"wrap: a destroyed context", SHARDRT_ERR_INVALID_HANDLE,
       [&] {
         shardrt_tensor t{0};
         return shardrt_tensor_wrap(&t, dead_ctx, scratch, SHARDRT_F64, 2, shape2, nullptr, SHARDRT_LAYOUT_ROW_MAJOR, -1, 0);
       }, "destroyed"},
      {"tensor: a destroyed handle reused", SHARDRT_ERR_INVALID_HANDLE,
       [&] { int nd = 0; return shardrt_tensor_shape(dead_tensor, &nd, nullptr, 0); }, "destroyed"},
      {"tensor: a handle never created", SHARDRT_ERR_INVALID_HANDLE,
       [&] { shardrt_dtype d; return shardrt_tensor_dtype(shardrt_tensor{t23.id + 4096}, &d); }, "never created"},
      {"tensor: dtype out NULL", SHARDRT_ERR_NULL_ARGUMENT, [&] { return shardrt_tensor_dtype(t23, nullptr); }, "dtype"},
      // ---- sharded tensors
      {"sharded: ndim differs from the local tensor", SHARDRT_ERR_SHAPE,
       [&] { return sharded(fx.tensor, 2, {1, 9}, {0, off}); }, "dims"},
      {"sharded: global_shape NULL", SHARDRT_ERR_NULL_ARGUMENT,
       [&] { shardrt_sharded x{0}; const int64_t o[3] = {0, 0, 0}; return shardrt_sharded_create(&x, s.mesh, fx.tensor, 3, nullptr, o); },
       "global_shape"},
      {"sharded: a box outside the global shape", SHARDRT_ERR_SHAPE,
       [&] { return sharded(fx.tensor, 3, {1, 9, 3}, {0, 9, 0}); }, "outside"},
      // Found by the capi fuzzer: offset + extent overflowed int64 (UBSan) before the bound was checked.
      {"sharded: an offset of 2^63 - 1", SHARDRT_ERR_SHAPE,
       [&] { return sharded(fx.tensor, 3, {1, 9, 3}, {0, INT64_MAX, 0}); }, "offset 9223372036854775807"},
      // Also the capi fuzzer's: the global volume 2^62 x 3 overflowed int64 when the boxes were tiled.
      {"sharded: a global shape of more than 2^63 elements", SHARDRT_ERR_SHAPE,
       [&] { return sharded(fx.tensor, 3, {1, int64_t{1} << 62, 3}, {0, 0, 0}); }, "more than 2^63 elements"},
      {"sharded: extents that do not sum to the global extent", SHARDRT_ERR_SHAPE,
       [&] { return sharded(fx.tensor, 3, {1, 11, 3}, {0, off, 0}); }, "add up"},
      {"sharded: the channels differ from the global shape", SHARDRT_ERR_SHAPE,
       [&] { return sharded(fx.tensor, 3, {1, 9, 4}, {0, off, 0}); }, ""},
      {"sharded: a destroyed tensor", SHARDRT_ERR_INVALID_HANDLE,
       [&] { return sharded(dead_tensor, 2, {2, 3}, {0, 0}); }, "destroyed"},
      {"sharded: the null mesh", SHARDRT_ERR_INVALID_HANDLE,
       [&] { shardrt_sharded x{0}; const int64_t g[2] = {2, 3}, o[2] = {0, 0}; return shardrt_sharded_create(&x, shardrt_mesh{0}, t23, 2, g, o); },
       "null"},
      {"points: fewer than 3 dims", SHARDRT_ERR_SHAPE, [&] { return sharded(t23, 2, {2, 3}, {0, 0}, true); }, "3 dims"},
      {"sharded: samples that do not tile dim 0", SHARDRT_ERR_SHAPE,
       [&] { return sharded(t23, 2, {4, 3}, {1, 0}); }, "sample"},
      // ---- models
      {"model: unknown kind", SHARDRT_ERR_VALUE, [&] { return create("transformer", flare_config(), nullptr, SHARDRT_F64); },
       "unknown model"},
      {"model: kind NULL", SHARDRT_ERR_NULL_ARGUMENT, [&] { return create(nullptr, flare_config(), nullptr, SHARDRT_F64); },
       "kind"},
      {"model: config that is not JSON", SHARDRT_ERR_VALUE, [&] { return create("flare", "{\"n_layers\": ", nullptr, SHARDRT_F64); },
       "JSON"},
      {"model: config file missing", SHARDRT_ERR_IO, [&] { return create("flare", "/nonexistent/flare.json", nullptr, SHARDRT_F64); },
       "cannot open"},
      {"model: a misspelt config key", SHARDRT_ERR_VALUE,
       [&] { return create("flare", R"({"functional_dim": 3, "out_dim": 2, "embedding_dim": 2, "n_layer": 2})", nullptr, SHARDRT_F64); },
       "n_layer"},
      {"model: an integer precision", SHARDRT_ERR_DTYPE, [&] { return create("flare", flare_config(), nullptr, SHARDRT_I64); },
       "precision"},
      {"model: weights file missing", SHARDRT_ERR_IO,
       [&] { return create("flare", flare_config(), "/nonexistent/w.safetensors", SHARDRT_F64); }, "w.safetensors"},
      {"model: weights of another FLARE config", SHARDRT_ERR_VALUE,
       [&] { return create("flare", flare_config(), golden("flare_irregular.weights.safetensors").c_str(), SHARDRT_F64); },
       "flare_irregular"},
      {"model: a ViT checkpoint for a FLARE", SHARDRT_ERR_VALUE,
       [&] { return create("flare", flare_config(), golden("vit2d.pt").c_str(), SHARDRT_F64); }, "vit2d.pt"},
      {"model: set_input of an unknown name", SHARDRT_ERR_VALUE, [&] { return shardrt_model_set_input(model, "x", fx.sharded); },
       "no input 'x'"},
      {"model: set_input with name NULL", SHARDRT_ERR_NULL_ARGUMENT,
       [&] { return shardrt_model_set_input(model, nullptr, fx.sharded); }, "name"},
      {"model: set_input from another mesh", SHARDRT_ERR_VALUE,
       [&] { return shardrt_model_set_input(model, "fx", fx_other.sharded); }, "another mesh"},
      {"model: forward with no input bound", SHARDRT_ERR_STATE, [&] { return shardrt_model_forward(fresh, out.sharded, 0); },
       "set_input"},
      {"model: forward with record_grad 2", SHARDRT_ERR_VALUE,
       [&] {
         shardrt_model_set_input(model, "fx", fx.sharded), shardrt_model_set_input(model, "embedding", emb.sharded);
         return shardrt_model_forward(model, out.sharded, 2);
       }, "record_grad"},
      {"model: an output of the wrong global shape", SHARDRT_ERR_SHAPE,
       [&] { return shardrt_model_forward(model, wrong_out.sharded, 0); }, "global"},
      {"model: fx with 4 channels for functional_dim 3", SHARDRT_ERR_SHAPE,
       [&] {
         shardrt_model_set_input(fresh, "fx", wrong_fx.sharded), shardrt_model_set_input(fresh, "embedding", emb.sharded);
         return shardrt_model_forward(fresh, out.sharded, 0);
       }, "fx"},
      {"model: backward before any forward", SHARDRT_ERR_STATE, [&] { return shardrt_model_backward(fresh, out.sharded); },
       "forward"},
      {"model: backward twice", SHARDRT_ERR_STATE,
       [&] {
         shardrt_model_forward(model, out.sharded, 1), shardrt_model_backward(model, target.sharded);
         return shardrt_model_backward(model, target.sharded);
       }, "already"},
      {"model: input_grad of a name never bound", SHARDRT_ERR_VALUE,
       [&] { return shardrt_model_input_grad(model, "time", fx.sharded); }, "time"},
      {"model: input_grad after an inference forward", SHARDRT_ERR_STATE,
       [&] { shardrt_model_forward(model, out.sharded, 0); return shardrt_model_input_grad(model, "fx", fx.sharded); },
       "backward"},
      {"model: export to an unknown extension", SHARDRT_ERR_VALUE, [&] { return shardrt_model_export(model, "/tmp/w.onnx"); },
       "extensions"},
      {"model: a tensor handle passed as a model", SHARDRT_ERR_INVALID_HANDLE,
       [&] { int64_t c = 0; return shardrt_model_num_parameters(shardrt_model{t23.id}, &c); }, "tensor handle"},
      // ---- optimizers, training, checkpoints
      {"optimizer: unknown key", SHARDRT_ERR_VALUE, [&] { return optimizer(R"({"optimizer": {"learning_rate": 0.1}})"); },
       "learning_rate"},
      {"optimizer: unknown algorithm", SHARDRT_ERR_VALUE, [&] { return optimizer(R"({"optimizer": {"algorithm": "adam"}})"); },
       "adam"},
      {"optimizer: a schedule spanning an unknown run", SHARDRT_ERR_VALUE,
       [&] { return optimizer(R"({"schedule": {"kind": "one_cycle"}})"); }, "steps"},
      {"optimizer: a string where a number belongs", SHARDRT_ERR_VALUE,
       [&] { return optimizer(R"({"optimizer": {"lr": "fast"}})"); }, "lr"},
      {"optimizer: unknown loss", SHARDRT_ERR_VALUE, [&] { return optimizer(R"({"loss": {"kind": "l1"}})"); }, "l1"},
      // Found while writing the capi / training_config fuzz targets (their seeds replay them): numbers that a
      // float-to-integer cast would have made undefined or an int would have wrapped, and betas that are not
      // numbers (a JSON type error, not the typed message).
      {"optimizer: steps 1e300", SHARDRT_ERR_VALUE, [&] { return optimizer(R"({"steps": 1e300})"); }, "'steps'"},
      {"optimizer: a fractional accumulation_steps", SHARDRT_ERR_VALUE,
       [&] { return optimizer(R"({"accumulation_steps": 2.5})"); }, "accumulation_steps"},
      {"optimizer: accumulation_steps past int", SHARDRT_ERR_VALUE,
       [&] { return optimizer(R"({"accumulation_steps": 4294967297})"); }, "[1, 2147483647]"},
      {"optimizer: betas that are strings", SHARDRT_ERR_VALUE,
       [&] { return optimizer(R"({"optimizer": {"betas": ["a", "b"]}})"); }, "two numbers"},
      {"optimizer: a second one on the same model", SHARDRT_ERR_STATE,
       [&] { shardrt_optimizer o{0}; return shardrt_optimizer_create(&o, model, "{}"); }, "already has"},
      {"optimizer: a destroyed handle reused", SHARDRT_ERR_INVALID_HANDLE, [&] { return shardrt_optimizer_step(dead_opt); },
       "destroyed"},
      {"train_step: loss slot NULL", SHARDRT_ERR_NULL_ARGUMENT, [&] { return shardrt_train_step(opt, target.sharded, nullptr); },
       "loss_host"},
      {"train_step: a target of the wrong shape", SHARDRT_ERR_SHAPE,
       [&] { double l = 0; return shardrt_train_step(opt, wrong_out.sharded, &l); }, "target"},
      {"checkpoint: load of a missing directory", SHARDRT_ERR_IO,
       [&] { int64_t st = 0; return shardrt_checkpoint_load(opt, "/nonexistent/ckpt", &st); }, "ckpt"},
      {"checkpoint: dir NULL", SHARDRT_ERR_NULL_ARGUMENT, [&] { return shardrt_checkpoint_save(opt, nullptr); }, "dir"},
  };
  // A model whose context was destroyed: every call but the destroys is SHARDRT_ERR_STATE.
  shardrt_context ctx3{0};
  shardrt_mesh mesh3{0};
  shardrt_model orphan{0};
  CAPI_OK(shardrt_context_create(&ctx3, MPI_COMM_WORLD, SHARDRT_AGREE_ERRORS));
  CAPI_OK(shardrt_mesh_create(&mesh3, ctx3, MPI_COMM_WORLD, 1, P, SHARDRT_DEVICE_CPU));
  CAPI_OK(shardrt_model_create(&orphan, mesh3, "flare", flare_config(), nullptr, SHARDRT_F64, 1));
  CAPI_OK(shardrt_context_destroy(ctx3));
  table.push_back({"model: a forward after its context was destroyed", SHARDRT_ERR_STATE,
                   [&] { return shardrt_model_forward(orphan, out.sharded, 0); }, "context"});
  table.push_back({"mesh: info after its context was destroyed", SHARDRT_ERR_STATE,
                   [&] { int d = 0; return shardrt_mesh_info(mesh3, &d, nullptr, nullptr, nullptr); }, "destroyed"});
  // Two weights files of the same FLARE config (seeds 1 and 2), for a rank that loads the other one.
  // A folder of this job's own (mkdtemp), not a fixed name that another checkout's suite may share.
  shardrt::test::SharedTempDir tmp("shardrt_capi_errors");
  const std::string& dir = tmp.path;
  const std::string weights_a = dir + "/a.safetensors", weights_b = dir + "/b.safetensors";
  CAPI_OK(shardrt_model_export(model, weights_a.c_str()));
  {
    shardrt_model m2{0};
    CAPI_OK(shardrt_model_create(&m2, s.mesh, "flare", flare_config(), nullptr, SHARDRT_F64, 2));
    CAPI_OK(shardrt_model_export(m2, weights_b.c_str()));
    CAPI_OK(shardrt_model_destroy(m2));
  }
  std::string heads4 = flare_config();
  const std::string two_heads = "\"n_head\": 2";
  heads4.replace(heads4.find(two_heads), two_heads.size(), "\"n_head\": 4");
  const size_t first_disagreeing = table.size();
  if (P > 1) {
    // Collective calls whose arguments differ on one rank: the same error on every rank, naming the argument.
    table.push_back({"model: one rank's config differs (n_head)", SHARDRT_ERR_VALUE,
                     [&] { return create("flare", rank == 1 ? heads4.c_str() : flare_config(), nullptr, SHARDRT_F64); },
                     "disagree on config"});
    table.push_back({"model: one rank's seed differs", SHARDRT_ERR_VALUE,
                     [&] {
                       shardrt_model m{0};
                       const shardrt_status st = shardrt_model_create(&m, s.mesh, "flare", flare_config(), nullptr,
                                                                      SHARDRT_F64, static_cast<uint64_t>(rank));
                       if (m.id) shardrt_model_destroy(m);
                       return st;
                     }, "disagree on seed"});
    table.push_back({"model: one rank loads another weights file", SHARDRT_ERR_VALUE,
                     [&] { return create("flare", flare_config(), (rank == 1 ? weights_b : weights_a).c_str(), SHARDRT_F64); },
                     "disagree on weights"});
    table.push_back({"model: one rank's dtype differs", SHARDRT_ERR_DTYPE,
                     [&] { return create("flare", flare_config(), nullptr, rank == 1 ? SHARDRT_F32 : SHARDRT_F64); },
                     "disagree on dtype"});
    table.push_back({"optimizer: one rank's learning rate differs", SHARDRT_ERR_VALUE,
                     [&] { return optimizer(rank == 1 ? R"({"optimizer": {"lr": 0.1}})" : R"({"optimizer": {"lr": 0.01}})"); },
                     "disagree on config"});
    table.push_back({"context: one rank's flags differ", SHARDRT_ERR_VALUE,
                     [&] {
                       shardrt_context c{0};
                       const shardrt_status st = shardrt_context_create(&c, MPI_COMM_WORLD, rank == 1 ? 2 : 0);
                       if (c.id) shardrt_context_destroy(c);
                       return st;
                     }, "disagree on flags"});
    table.push_back({"mesh: one rank's ddp differs", SHARDRT_ERR_VALUE,
                     [&] {
                       shardrt_mesh m{0};
                       const shardrt_status st = shardrt_mesh_create(&m, s.ctx, MPI_COMM_WORLD, rank == 1 ? -1 : 1, P, -1);
                       if (m.id) shardrt_mesh_destroy(m);
                       return st;
                     }, "disagree on ddp"});
    table.push_back({"forward: one rank's output has another global shape", SHARDRT_ERR_SHAPE,
                     [&] { return shardrt_model_forward(model, rank == 1 ? wrong_out.sharded : out.sharded, 0); },
                     "output's global shape"});
    table.push_back({"forward: one rank passes a null output handle", SHARDRT_ERR_INVALID_HANDLE,
                     [&] { return shardrt_model_forward(model, rank == 1 ? shardrt_sharded{0} : out.sharded, 0); },
                     "output is the null"});
    table.push_back({"train_step: one rank's target has another global shape", SHARDRT_ERR_SHAPE,
                     [&] { double l = 0; return shardrt_train_step(opt, rank == 1 ? wrong_out.sharded : target.sharded, &l); },
                     "target's global shape"});
    table.push_back({"checkpoint: one rank saves to another directory", SHARDRT_ERR_VALUE,
                     [&] { return shardrt_checkpoint_save(opt, (dir + "/ckpt" + (rank == 1 ? "1" : "0")).c_str()); },
                     "disagree on dir"});
    // Ranks that disagree, or a single rank that is wrong: still the same status on every rank.
    table.push_back({"sharded: ranks disagree on the global shape", SHARDRT_ERR_SHAPE,
                     [&] { return sharded(fx.tensor, 3, {1, 9 + rank, 3}, {0, off, 0}); }, "disagree"});
    table.push_back({"sharded: every rank claims the first points (overlap)", SHARDRT_ERR_SHAPE,
                     [&] { return sharded(fx.tensor, 3, {1, 9, 3}, {0, 0, 0}); }, ""});
    table.push_back({"sharded: slabs out of rank order", SHARDRT_ERR_SHAPE,
                     [&] { return sharded(fx.tensor, 3, {1, 9, 3}, {0, 9 - off - n, 0}); }, ""});
    table.push_back({"sharded: one rank's box outside the global shape", SHARDRT_ERR_SHAPE,
                     [&] { return sharded(fx.tensor, 3, {1, 9, 3}, {0, rank == P - 1 ? 9 : off, 0}); }, "outside"});
    table.push_back({"wrap+sharded: one rank wraps 2 dims", SHARDRT_ERR_SHAPE,
                     [&] { return rank == 1 ? sharded(t23, 3, {1, 9, 3}, {0, off, 0}) : sharded(fx.tensor, 3, {1, 9, 3}, {0, off, 0}); },
                     "dims"});
    // Replicated tensors (every rank states the whole sample box) gone wrong.
    table.push_back({"replicated: an input whose copies differ across the ranks (time = rank)", SHARDRT_ERR_VALUE,
                     [&] {
                       CAPI_OK(shardrt_model_set_input(timed, "fx", fx.sharded));
                       CAPI_OK(shardrt_model_set_input(timed, "embedding", emb.sharded));
                       CAPI_OK(shardrt_model_set_input(timed, "time", time_differs));
                       return shardrt_model_forward(timed, out.sharded, 0);
                     }, "replicated input 'time'"});
    table.push_back({"replicated: one rank holds the whole output box, another a part of it", SHARDRT_ERR_SHAPE,
                     [&] { return sharded(rank == 0 ? t17 : t15, 2, {1, 7}, {0, 0}); }, "replicated tensor"});
    table.push_back({"replicated: the ranks' whole output boxes differ in shape", SHARDRT_ERR_SHAPE,
                     [&] { return rank == 1 ? sharded(t15, 2, {1, 5}, {0, 0}) : sharded(t17, 2, {1, 7}, {0, 0}); },
                     "disagree"});
    table.push_back({"replicated: a time value on rank 0 only (the others a zero box)", SHARDRT_ERR_SHAPE,
                     [&] { return sharded(rank == 0 ? t1 : t0, 1, {1}, {0}); }, "replicated"});
    for (size_t i = first_disagreeing; i < table.size(); ++i) table[i].same_message = true;
  }
  CHECK(table.size() >= 40);
  for (const BadCall& b : table) {
    shardrt_clear_error();
    const shardrt_status got = b.call();
    const std::string msg = shardrt_last_error();
    INFO("case '" << b.what << "' on rank " << rank << ": " << msg);
    CHECK(shardrt_status_name(got) == std::string(shardrt_status_name(b.expected)));
    CHECK(shardrt_last_status() == b.expected);
    CHECK(msg.rfind("shardrt_", 0) == 0);  // starts with the function's name
    if (!b.message_part.empty()) CHECK(msg.find(b.message_part) != std::string::npos);
    // Every rank saw the same status.
    int mine = static_cast<int>(got), lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi);
    if (b.same_message) CHECK(same_everywhere(msg));
  }
  // Nothing above broke the good handles: the model still trains.
  double loss = -1;
  CAPI_OK(shardrt_model_set_input(model, "fx", fx.sharded));
  CAPI_OK(shardrt_train_step(opt, target.sharded, &loss));
  CHECK(std::isfinite(loss));
  shardrt_tensor_destroy(t23);
  shardrt_sharded_destroy(time_differs);
  for (shardrt_tensor t : {t17, t15, t1, t0}) shardrt_tensor_destroy(t);
  shardrt_model_destroy(timed);
  shardrt_model_destroy(orphan);
  shardrt_mesh_destroy(mesh3);
  shardrt_optimizer_destroy(opt);
  shardrt_model_destroy(fresh);
  shardrt_model_destroy(model);
}
