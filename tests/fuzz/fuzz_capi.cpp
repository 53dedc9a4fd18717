// libFuzzer target: the C API's argument validation (capi/shardrt.h). Each input is a small program of C API calls,
// read byte by byte: tensor wraps with fuzzed dtype / ndim / shape / strides / layout / device / flags and data
// pointers NULL or not, sharded tensors with fuzzed global shapes and offsets, models built from fuzzed JSON
// configs, optimizers from fuzzed optimizer documents, forward / backward / train_step on matching and mismatched
// tensors, and every handle argument drawn from live, destroyed (use after destroy, destroy twice), null, forged and
// wrong-kind ids, out-parameters NULL or not, absurd sizes.
//
// What must hold for every call: it returns a status of the enum; a failure leaves a message that starts with the
// function's name ("shardrt_...") and writes the null handle to a handle out-parameter; nothing crashes, leaks or
// trips a sanitizer. After the program, the context and the mesh still work (one valid wrap, query and destroy),
// and every live handle destroys with SHARDRT_OK.
//
// The MPI setup and the context (a 1-rank mesh over MPI_COMM_WORLD) are made once per process in the init hook;
// each input's handles are destroyed at its end, so inputs do not see each other's objects.
//
// Caller memory: the C API cannot know how big the caller's arrays are, so the program keeps its side of the
// contract: data pointers point into `arena` and a wrap whose elements would reach past it is never read (its
// sharded tensors are kept out of the calls that read or write data); shape / offset arrays hold the ndim entries
// the call is told. Everything else is the library's to check.
//
// Built by tools/fuzz from a clang ASan + UBSan + fuzzer-no-link build of the CPU-only library (build-fuzz/lib).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "capi/shardrt.h"
#include "tests/fuzz/fuzz_target.h"

// OpenMPI keeps allocations from MPI_Init to exit, some made by its dlopen'ed components (which LeakSanitizer cannot
// name, so no suppression matches them): the process-wide MPI and context setup runs with leak tracking off.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/lsan_interface.h>
#define SHARDRT_LSAN_OFF() __lsan_disable()
#define SHARDRT_LSAN_ON() __lsan_enable()
#endif
#endif
#if !defined(SHARDRT_LSAN_OFF) && defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define SHARDRT_LSAN_OFF() __lsan_disable()
#define SHARDRT_LSAN_ON() __lsan_enable()
#endif
#ifndef SHARDRT_LSAN_OFF
#define SHARDRT_LSAN_OFF() (void)0
#define SHARDRT_LSAN_ON() (void)0
#endif

namespace {

shardrt_context g_ctx{0};
shardrt_mesh g_mesh{0};
bool g_we_initialised_mpi = false;

// Caller memory every wrap points into (doubles, so any dtype's alignment holds).
constexpr size_t kArenaElems = 4096;
double arena[kArenaElems];

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_capi: %s (last error: %s)\n", what, shardrt_last_error());
  __builtin_trap();
}

// The input, read as a stream of choices; past its end every read is 0.
struct Bytes {
  const uint8_t* p;
  size_t n, i = 0;
  bool done() const { return i >= n; }
  uint8_t u8() { return i < n ? p[i++] : 0; }
  // Every read in its own statement: the order of the bytes must not depend on the compiler's order of evaluation
  // (the replay build and the libFuzzer build must read a seed alike).
  uint32_t u32() {
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= uint32_t(u8()) << (8 * k);
    return v;
  }
  uint64_t u64() {
    const uint64_t lo = u32();
    return lo | uint64_t(u32()) << 32;
  }
  // A pointer argument: NULL one time in `in`, else p.
  template <typename T>
  T* maybe_null(T* p, unsigned in) { return chance(in) ? nullptr : p; }
  bool chance(unsigned in) { return u8() % in == 0; }
  // A size or index: mostly small, sometimes at the edges of the integer types.
  int64_t extent() {
    static const int64_t edges[] = {-1, -2, INT32_MAX, int64_t{1} << 31, int64_t{1} << 32, int64_t{1} << 62,
                                    INT64_MAX, INT64_MIN, int64_t{1} << 40, 4096};
    const uint8_t b = u8();
    if (b < 200) return b % 12;
    return edges[b % (sizeof(edges) / sizeof(edges[0]))];
  }
  int small_int(int lo, int hi) { return lo + int(u8() % unsigned(hi - lo + 1)); }
  std::string text(size_t max) {
    const size_t lo = u8();
    const size_t len = std::min<size_t>(lo | size_t(u8() & 3) << 8, max);
    std::string s;
    for (size_t k = 0; k < len && !done(); ++k) s.push_back(char(u8()));
    return s;
  }
};

// Every call's result: a status of the enum, a message on failure.
shardrt_status check(shardrt_status st) {
  const int v = int(st);
  if (v < SHARDRT_OK || v > SHARDRT_ERR_INTERNAL) fail("a status outside the enum");
  if (st != SHARDRT_OK) {
    const char* msg = shardrt_last_error();
    if (!msg || std::strncmp(msg, "shardrt_", 8) != 0) fail("a failure without a message naming the call");
    if (shardrt_last_status() != st) fail("shardrt_last_status differs from the returned status");
    // INTERNAL is for a failed allocation; anything else under it is an exception no check typed.
    if (st == SHARDRT_ERR_INTERNAL && !std::strstr(msg, "out of memory"))
      fail("SHARDRT_ERR_INTERNAL: an unchecked argument reached the library");
  }
  return st;
}

// A handle result: set on success, the null handle on failure.
template <typename H>
bool created(shardrt_status st, const H& h) {
  if (st == SHARDRT_OK && h.id == 0) fail("success with the null handle");
  if (st != SHARDRT_OK && h.id != 0) fail("failure left a non-null handle");
  return st == SHARDRT_OK;
}

size_t dtype_size(int dtype) {
  switch (dtype) {
    case SHARDRT_F64: case SHARDRT_I64: return 8;
    case SHARDRT_F32: case SHARDRT_I32: return 4;
    case SHARDRT_BF16: case SHARDRT_F16: return 2;
    case SHARDRT_U8: return 1;
    default: return 8;
  }
}

struct Tensor {
  shardrt_tensor h;
  bool backed;  // every element lies inside `arena`
};
struct Sharded {
  shardrt_sharded h;
  bool backed;
};

// One input's world: its live handles, the ones it destroyed, and the lazily made good pieces.
struct Program {
  Bytes in;
  std::vector<Tensor> tensors;
  std::vector<Sharded> sharded;
  std::vector<shardrt_model> models;
  std::vector<shardrt_optimizer> optimizers;
  std::vector<shardrt_mesh> meshes;
  std::vector<uint64_t> dead;  // destroyed ids of any kind

  // A handle id for an argument of kind `live` (ids of that kind this program holds): mostly a live one, else a
  // destroyed one, the null handle, a forged id, or a live id of another kind.
  uint64_t pick_id(const std::vector<uint64_t>& live) {
    const uint8_t b = in.u8();
    if (b < 160 && !live.empty()) return live[b % live.size()];
    switch (b % 6) {
      case 0: return 0;
      case 1: return dead.empty() ? 0 : dead[in.u8() % dead.size()];
      case 2: return in.u64();  // forged
      case 3: {                 // well-formed but never issued: a high slot of a real kind
        const uint64_t kind = 1 + in.u8() % 6;
        return kind << 56 | uint64_t(1) << 32 | (1000 + in.u8());
      }
      default: {  // another kind's live id
        std::vector<uint64_t> any = all_live();
        return any.empty() ? g_ctx.id : any[in.u8() % any.size()];
      }
    }
  }
  std::vector<uint64_t> all_live() const {
    std::vector<uint64_t> v{g_ctx.id, g_mesh.id};
    for (const auto& t : tensors) v.push_back(t.h.id);
    for (const auto& s : sharded) v.push_back(s.h.id);
    for (const auto& m : models) v.push_back(m.id);
    for (const auto& o : optimizers) v.push_back(o.id);
    for (const auto& m : meshes) v.push_back(m.id);
    return v;
  }
  shardrt_context ctx() { return in.u8() < 200 ? g_ctx : shardrt_context{pick_id({})}; }
  shardrt_mesh mesh() {
    std::vector<uint64_t> live{g_mesh.id};
    for (const auto& m : meshes) live.push_back(m.id);
    return shardrt_mesh{pick_id(live)};
  }
  shardrt_tensor tensor() {
    std::vector<uint64_t> live;
    for (const auto& t : tensors) live.push_back(t.h.id);
    return shardrt_tensor{pick_id(live)};
  }
  // For calls that read or write the data: a backed sharded tensor, or an id that is not a live sharded tensor.
  shardrt_sharded sharded_arg(bool needs_data) {
    std::vector<uint64_t> live;
    for (const auto& s : sharded)
      if (s.backed || !needs_data) live.push_back(s.h.id);
    const uint64_t id = pick_id(live);
    if (needs_data)
      for (const auto& s : sharded)
        if (s.h.id == id && !s.backed) return shardrt_sharded{0};
    return shardrt_sharded{id};
  }
  shardrt_model model() {
    std::vector<uint64_t> live;
    for (const auto& m : models) live.push_back(m.id);
    return shardrt_model{pick_id(live)};
  }
  shardrt_optimizer optimizer() {
    std::vector<uint64_t> live;
    for (const auto& o : optimizers) live.push_back(o.id);
    return shardrt_optimizer{pick_id(live)};
  }
  const char* input_name() {
    static const char* names[] = {"fx", "embedding", "time", "x", "", nullptr, "fx\xff", "geometry"};
    return names[in.u8() % 8];
  }

  // ---- the calls ----
  void wrap() {
    const int dtype = in.chance(8) ? int(int8_t(in.u8())) : in.small_int(0, 6);
    int ndim = in.chance(8) ? int(int8_t(in.u8())) : in.small_int(0, 4);
    const int entries = std::max(0, std::min(ndim, 16));  // our arrays hold what the call is told (<= 16 read)
    std::vector<int64_t> shape(size_t(entries) + 1), strides(size_t(entries) + 1);
    for (int k = 0; k < entries; ++k) shape[k] = in.chance(4) ? in.extent() : 1 + in.u8() % 4;
    const bool give_strides = in.chance(3);
    for (int k = 0; k < entries; ++k) strides[k] = in.extent();
    if (ndim > 16) ndim = entries;  // an array of ndim entries is the caller's side of the contract
    const int layout = in.chance(8) ? int(int8_t(in.u8())) : in.small_int(0, 1);
    const int device = in.chance(8) ? int(int8_t(in.u8())) : SHARDRT_DEVICE_CPU;
    const int flags = in.chance(8) ? int(int8_t(in.u8())) : in.small_int(0, 2);
    const uint8_t where = in.u8();
    void* data = where % 8 == 0 ? nullptr : static_cast<void*>(arena + where % 64);
    // Is every element inside the arena? (row-major strides when none are given; col-major has the same span)
    bool backed = data != nullptr;
    unsigned __int128 span = 0, numel = 1;
    for (int k = 0; k < ndim && backed; ++k) {
      if (shape[k] < 0) { backed = false; break; }
      numel *= static_cast<unsigned __int128>(shape[k]);
      if (numel > kArenaElems * 8) backed = false;
    }
    if (backed && numel > 0) {
      if (give_strides) {
        for (int k = 0; k < ndim; ++k) {
          if (strides[k] < 0) { backed = false; break; }
          if (shape[k] > 0) span += static_cast<unsigned __int128>(shape[k] - 1) * static_cast<unsigned __int128>(strides[k]);
        }
        span += 1;
      } else {
        span = numel;
      }
      const size_t offset = where % 64;
      if (span * dtype_size(dtype) > (kArenaElems - offset) * sizeof(double)) backed = false;
    }
    shardrt_tensor t{in.u8() | 1u};  // garbage in the out slot: the call must overwrite it
    const bool null_out = in.chance(16);
    const shardrt_context c = ctx();
    const int64_t* shape_arg = in.maybe_null(shape.data(), 16);
    const shardrt_status st = check(shardrt_tensor_wrap(null_out ? nullptr : &t, c, data, dtype, ndim, shape_arg,
                                                        give_strides ? strides.data() : nullptr, layout, device, flags));
    if (null_out) {
      if (st != SHARDRT_ERR_NULL_ARGUMENT) fail("wrap with out NULL did not fail with NULL_ARGUMENT");
      return;
    }
    if (created(st, t)) tensors.push_back({t, backed});
  }

  void make_sharded() {
    const bool points = in.chance(3);
    const shardrt_tensor local = tensor();
    bool backed = false;
    for (const auto& t : tensors)
      if (t.h.id == local.id) backed = t.backed;
    int ndim = in.chance(8) ? int(int8_t(in.u8())) : in.small_int(0, 5);
    const int entries = std::max(0, std::min(ndim, 16));
    if (ndim > 16) ndim = entries;
    // Mostly the local tensor's own shape as the global one (a 1-rank mesh holds everything), then mutated.
    std::vector<int64_t> local_shape(16, 0), global(size_t(entries) + 1, 0), offsets(size_t(entries) + 1, 0);
    int local_ndim = 0;
    shardrt_clear_error();
    const bool have_shape = shardrt_tensor_shape(local, &local_ndim, local_shape.data(), 16) == SHARDRT_OK;
    for (int k = 0; k < entries; ++k) {
      global[k] = have_shape && k < local_ndim && !in.chance(4) ? local_shape[k] : in.extent();
      offsets[k] = in.chance(4) ? in.extent() : 0;
    }
    shardrt_sharded s{0};
    const shardrt_mesh m = mesh();
    const int64_t* g = in.chance(16) ? nullptr : global.data();
    const int64_t* o = in.chance(16) ? nullptr : offsets.data();
    const shardrt_status st = check(points ? shardrt_sharded_create_points(&s, m, local, ndim, g, o)
                                           : shardrt_sharded_create(&s, m, local, ndim, g, o));
    if (created(st, s)) sharded.push_back({s, backed});
  }

  void queries() {
    int ndim = 0, contiguous = 0, copied = 0;
    int64_t shape[16], count = 0, bytes = 0;
    shardrt_dtype dt;
    const int cap = in.chance(4) ? in.small_int(-2, 16) : 8;
    int64_t* shape_out = cap > 0 ? shape : nullptr;
    switch (in.u8() % 9) {
      case 0: { const shardrt_tensor t = tensor(); check(shardrt_tensor_shape(t, in.maybe_null(&ndim, 8), shape_out, cap)); break; }
      case 1: { const shardrt_tensor t = tensor(); check(shardrt_tensor_dtype(t, in.maybe_null(&dt, 8))); break; }
      case 2: { const shardrt_tensor t = tensor(); check(shardrt_tensor_is_contiguous(t, in.maybe_null(&contiguous, 8))); break; }
      case 3: {
        const shardrt_tensor t = tensor();
        int64_t* c = in.maybe_null(&count, 8);
        check(shardrt_tensor_copies(t, c, in.maybe_null(&bytes, 8)));
        break;
      }
      case 4: { const shardrt_sharded x = sharded_arg(false); check(shardrt_sharded_global_shape(x, in.maybe_null(&ndim, 8), shape_out, cap)); break; }
      case 5: { const shardrt_sharded x = sharded_arg(false); check(shardrt_sharded_is_copy(x, in.maybe_null(&copied, 8))); break; }
      case 6: {
        int a, b, c, d;
        const shardrt_mesh m = mesh();
        int* pa = in.maybe_null(&a, 2);
        int* pb = in.maybe_null(&b, 2);
        int* pc = in.maybe_null(&c, 2);
        check(shardrt_mesh_info(m, pa, pb, pc, in.maybe_null(&d, 2)));
        break;
      }
      case 7: {
        static const char* kinds[] = {nullptr, "all_reduce", "all_gather", "bogus", ""};
        const shardrt_mesh m = mesh();
        const char* kind = kinds[in.u8() % 5];
        int64_t* c = in.maybe_null(&count, 4);
        check(shardrt_mesh_comm_counts(m, kind, c, in.maybe_null(&bytes, 4)));
        break;
      }
      case 8: {
        const shardrt_context x = ctx();
        int64_t* c = in.maybe_null(&count, 4);
        check(shardrt_context_copies(x, c, in.maybe_null(&bytes, 4)));
        break;
      }
    }
  }

  void status_calls() {
    char buf[16];
    (void)shardrt_status_name(int(in.u32()));
    const size_t cap = in.u8() % 17;
    const size_t full = shardrt_last_error_copy(cap ? buf : nullptr, cap);
    if (cap && std::strlen(buf) != std::min(full, cap - 1)) fail("last_error_copy truncated wrongly");
    if (in.chance(4)) shardrt_clear_error();
  }

  // A model config: a valid small one of each kind, one mutated by the input, or the input's own text.
  std::string model_config(const char* kind) {
    static const char* flare = R"({"functional_dim": 3, "out_dim": 2, "embedding_dim": 2, "n_layers": 1, "n_hidden": 8, "n_head": 2, "mlp_ratio": 1, "slice_num": 2})";
    static const char* vit = R"({"img_size": [8, 8], "patch_size": 4, "in_channels": 1, "num_classes": 2, "embed_dim": 8, "num_heads": 2, "depth": 1, "mlp_ratio": 1.0})";
    switch (in.u8() % 4) {
      case 0: return kind && std::string(kind) == "vit" ? vit : flare;
      case 1: return "/nonexistent/config.json";
      default: return in.text(600);
    }
  }
  // Sizes a test machine can hold: the program leaves out configs whose numbers ask for a model of more than a
  // few MB (a legitimate request, only too big to build per input); absurd values (>= 2^40) stay in, as do all
  // negative and fractional ones.
  static bool modest(const std::string& config) {
    size_t i = 0;
    while (i < config.size()) {
      if (config[i] >= '0' && config[i] <= '9') {
        size_t j = i;
        while (j < config.size() && config[j] >= '0' && config[j] <= '9') ++j;
        const bool fraction = j < config.size() && (config[j] == '.' || config[j] == 'e' || config[j] == 'E');
        const double v = std::strtod(config.substr(i, j - i).c_str(), nullptr);
        if (!fraction && v > 16 && v < 1099511627776.0) return false;
        if (fraction && j + 1 < config.size() && (config[j] == 'e' || config[j] == 'E')) return false;
        i = j + 1;
      } else {
        ++i;
      }
    }
    return true;
  }

  void model_create() {
    if (models.size() >= 2) return;
    static const char* kinds[] = {"flare", "vit", "geotransolver", "", "transformer", nullptr, "FLARE"};
    const char* kind = kinds[in.u8() % 7];
    const std::string config = model_config(kind);
    if (!modest(config)) return;
    static const char* weights[] = {nullptr, "", "/nonexistent/w.safetensors", "/nonexistent/w.mdlus", "/dev/null"};
    const char* w = weights[in.u8() % 5];
    const int dtype = in.chance(6) ? int(int8_t(in.u8())) : (in.chance(2) ? SHARDRT_F64 : SHARDRT_F32);
    shardrt_model m{7};
    const shardrt_mesh on = mesh();
    const char* config_arg = in.maybe_null(config.c_str(), 16);
    const uint64_t seed = in.u64();
    const shardrt_status st = check(shardrt_model_create(&m, on, kind, config_arg, w, dtype, seed));
    if (created(st, m)) models.push_back(m);
  }

  void optimizer_create() {
    if (optimizers.size() >= 2) return;
    static const char* configs[] = {"{}", R"({"optimizer": {"algorithm": "sgd", "lr": 0.1}})",
                                    R"({"schedule": {"kind": "warmup_cosine", "warmup_steps": 2}, "steps": 10})",
                                    R"({"optimizer": {"mode": "zero3"}})"};
    const uint8_t b = in.u8();
    const std::string config = b % 2 ? std::string(configs[(b / 2) % 4]) : in.text(400);
    shardrt_optimizer o{9};
    const shardrt_model of = model();
    const shardrt_status st = check(shardrt_optimizer_create(&o, of, in.maybe_null(config.c_str(), 16)));
    if (created(st, o)) optimizers.push_back(o);
  }

  // The good pieces for FLARE(functional_dim 3, embedding_dim 2, out_dim 2) on 9 points: fx, embedding, out.
  void good_pieces() {
    const int64_t C[3] = {3, 2, 2};
    for (int k = 0; k < 3; ++k) {
      const int64_t shape[3] = {1, 9, C[k]};
      shardrt_tensor t{0};
      double* data = arena + 64 + k * 64;
      for (int i = 0; i < 9 * C[k]; ++i) data[i] = 0.1 * (i % 7) - 0.3;
      if (!created(check(shardrt_tensor_wrap(&t, g_ctx, data, SHARDRT_F64, 3, shape, nullptr, 0, -1, 0)), t)) fail("a good wrap failed");
      tensors.push_back({t, true});
      const int64_t offsets[3] = {0, 0, 0};
      shardrt_sharded s{0};
      if (!created(check(shardrt_sharded_create(&s, g_mesh, t, 3, shape, offsets)), s)) fail("a good sharded create failed");
      sharded.push_back({s, true});
    }
  }

  static uint64_t id_of(const Tensor& t) { return t.h.id; }
  static uint64_t id_of(const Sharded& s) { return s.h.id; }
  template <typename H>
  static uint64_t id_of(const H& h) { return h.id; }

  void step() {
    double loss = 0;
    int64_t n = 0;
    const int op = in.u8() % 24;
    switch (op) {
      case 0: case 1: case 2: wrap(); break;
      case 3: case 4: make_sharded(); break;
      case 5: queries(); break;
      case 6: status_calls(); break;
      case 7: {
        const shardrt_tensor t = tensor();
        const shardrt_status st = check(shardrt_tensor_destroy(t));
        settle(tensors, t.id, st);
        break;
      }
      case 8: {
        const shardrt_sharded s = sharded_arg(false);
        const shardrt_status st = check(shardrt_sharded_destroy(s));
        settle(sharded, s.id, st);
        break;
      }
      case 9: model_create(); break;
      case 10: if (sharded.size() < 3) good_pieces(); break;
      case 11: case 15: {
        const shardrt_model m = model();
        const char* name = input_name();
        const shardrt_sharded x = sharded_arg(true);
        check(op == 11 ? shardrt_model_set_input(m, name, x) : shardrt_model_input_grad(m, name, x));
        break;
      }
      case 12: check(shardrt_model_clear_inputs(model())); break;
      case 13: case 14: {
        const shardrt_model m = model();
        const shardrt_sharded x = sharded_arg(true);
        const int record = in.chance(4) ? int(int8_t(in.u8())) : in.small_int(0, 1);
        check(op == 13 ? shardrt_model_forward(m, x, record) : shardrt_model_backward(m, x));
        break;
      }
      case 16: check(shardrt_model_zero_grad(model())); break;
      case 17: { const shardrt_model m = model(); check(shardrt_model_num_parameters(m, in.maybe_null(&n, 4))); break; }
      case 18: {
        const shardrt_model m = model();
        const shardrt_status st = check(shardrt_model_destroy(m));
        settle(models, m.id, st);
        break;
      }
      case 19: optimizer_create(); break;
      case 20: {
        switch (in.u8() % 4) {
          case 0: check(shardrt_optimizer_step(optimizer())); break;
          case 1: { const shardrt_optimizer o = optimizer(); check(shardrt_optimizer_steps(o, in.maybe_null(&n, 4))); break; }
          case 2: {
            const shardrt_optimizer o = optimizer();
            const shardrt_sharded target = sharded_arg(true);
            check(shardrt_train_step(o, target, in.maybe_null(&loss, 4)));
            break;
          }
          case 3: {
            const shardrt_optimizer o = optimizer();
            const shardrt_status st = check(shardrt_optimizer_destroy(o));
            settle(optimizers, o.id, st);
            break;
          }
        }
        break;
      }
      case 21: {  // files: only paths that cannot be written or read
        static const char* paths[] = {nullptr, "", "/nonexistent/ckpt", "/proc/shardrt-fuzz.onnx", "/nonexistent/m.safetensors"};
        const char* p = paths[in.u8() % 5];
        switch (in.u8() % 3) {
          case 0: { const shardrt_optimizer o = optimizer(); check(shardrt_checkpoint_load(o, p, in.maybe_null(&n, 2))); break; }
          case 1: if (!p || !*p) check(shardrt_checkpoint_save(optimizer(), p)); break;
          case 2: check(shardrt_model_export(model(), p)); break;
        }
        break;
      }
      case 22: {  // meshes and contexts of its own, destroyed twice
        if (meshes.size() < 2 && in.chance(2)) {
          shardrt_mesh m{3};
          const int ddp = in.chance(4) ? int(int8_t(in.u8())) : 1;
          const int domain = in.chance(4) ? int(int8_t(in.u8())) : 1;
          const int device = in.chance(4) ? int(int8_t(in.u8())) : SHARDRT_DEVICE_CPU;
          const shardrt_context c = ctx();
          const MPI_Comm comm = in.chance(8) ? MPI_COMM_NULL : MPI_COMM_WORLD;
          const shardrt_status st = check(shardrt_mesh_create(&m, c, comm, ddp, domain, device));
          if (created(st, m)) meshes.push_back(m);
        } else {
          const shardrt_mesh m = mesh();
          if (m.id == g_mesh.id) break;  // the process's own mesh stays
          const shardrt_status st = check(shardrt_mesh_destroy(m));
          settle(meshes, m.id, st);
        }
        break;
      }
      case 23: {
        shardrt_context c{5};
        const int flags = in.chance(2) ? in.small_int(0, 3) : int(in.u32());
        const MPI_Comm comm = in.chance(4) ? MPI_COMM_NULL : MPI_COMM_WORLD;
        const shardrt_status st = check(shardrt_context_create(&c, comm, flags));
        if (created(st, c)) {
          if (check(shardrt_context_destroy(c)) != SHARDRT_OK) fail("destroying a new context failed");
          dead.push_back(c.id);
        }
        const shardrt_context other{pick_id({})};
        if (other.id != g_ctx.id) check(shardrt_context_destroy(other));
        break;
      }
    }
  }

  // After a destroy call: a live handle must have destroyed (and is now dead); anything else must have failed.
  template <typename V>
  void settle(V& live, uint64_t id, shardrt_status st) {
    for (size_t k = 0; k < live.size(); ++k) {
      if (id_of(live[k]) == id) {
        if (st != SHARDRT_OK) fail("destroying a live handle failed");
        dead.push_back(id);
        live.erase(live.begin() + long(k));
        return;
      }
    }
    if (st == SHARDRT_OK) fail("destroying a handle that is not live succeeded");
  }

  void finish() {
    // The context and mesh still work after whatever failed.
    const int64_t shape[2] = {2, 3};
    shardrt_tensor t{0};
    if (shardrt_tensor_wrap(&t, g_ctx, arena, SHARDRT_F64, 2, shape, nullptr, 0, SHARDRT_DEVICE_CPU, 0) != SHARDRT_OK)
      fail("the context no longer wraps a tensor after the program");
    int ndim = 0;
    int64_t got[2] = {0, 0};
    if (shardrt_tensor_shape(t, &ndim, got, 2) != SHARDRT_OK || ndim != 2 || got[0] != 2 || got[1] != 3)
      fail("a fresh tensor reports the wrong shape");
    if (shardrt_tensor_destroy(t) != SHARDRT_OK) fail("a fresh tensor does not destroy");
    int ddp = 0, domain = 0;
    if (shardrt_mesh_info(g_mesh, &ddp, &domain, nullptr, nullptr) != SHARDRT_OK || ddp != 1 || domain != 1)
      fail("the mesh no longer answers after the program");
    // Every live handle destroys, in an order unlike creation's (objects keep what they need alive).
    for (const auto& o : optimizers) if (shardrt_optimizer_destroy(o) != SHARDRT_OK) fail("optimizer destroy");
    for (const auto& t2 : tensors) if (shardrt_tensor_destroy(t2.h) != SHARDRT_OK) fail("tensor destroy");
    for (const auto& m : models) if (shardrt_model_destroy(m) != SHARDRT_OK) fail("model destroy");
    for (const auto& s : sharded) if (shardrt_sharded_destroy(s.h) != SHARDRT_OK) fail("sharded destroy");
    for (const auto& m : meshes) if (shardrt_mesh_destroy(m) != SHARDRT_OK) fail("mesh destroy");
    shardrt_clear_error();
  }
};

void teardown() {
  SHARDRT_LSAN_OFF();
  if (g_ctx.id) shardrt_context_destroy(g_ctx);
  g_ctx.id = 0;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialised_mpi && !finalized) MPI_Finalize();
}

}  // namespace

SHARDRT_FUZZ_INIT(capi) {
  SHARDRT_LSAN_OFF();
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    g_we_initialised_mpi = true;
  }
  if (shardrt_context_create(&g_ctx, MPI_COMM_WORLD, 0) != SHARDRT_OK ||
      shardrt_mesh_create(&g_mesh, g_ctx, MPI_COMM_SELF, 1, 1, SHARDRT_DEVICE_CPU) != SHARDRT_OK)
    fail("the fuzz target's context and 1-rank mesh could not be made");
  SHARDRT_LSAN_ON();
  std::atexit(teardown);
}

SHARDRT_FUZZ_TARGET(capi) {
  Program p{Bytes{data, size}, {}, {}, {}, {}, {}, {}};
  for (int calls = 0; calls < 48 && !p.in.done(); ++calls) p.step();
  p.finish();
  return 0;
}
