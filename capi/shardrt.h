/* ShardRT's C API: train and run bundled models (FLARE, ViT, GeoTransolver) inside an MPI simulation code, on the
 * code's own domain decomposition, from C, C++ or Fortran (iso_c_binding).
 *
 * This header is C99 (and C++) clean and names no ShardRT C++ type. Link with -lshardrt and MPI.
 * docs/embedding.md walks through it by task (infer, train in situ, checkpoint).
 *
 * Conventions
 * - Every function returns a shardrt_status. SHARDRT_OK is 0; on any other value shardrt_last_error() holds a
 *   message naming the call, the shapes/dtypes involved and the rank. Nothing here calls exit() or abort() on bad
 *   input, and no C++ exception ever leaves a function of this header.
 * - Out-parameters are written only on success (handles: set to the null handle on failure).
 * - Handles are small value types ({uint64_t id}). A handle of 0 is the null handle. Handles are generation
 *   counted: a destroyed handle, a handle of another kind or a made-up id is SHARDRT_ERR_INVALID_HANDLE, never
 *   undefined behaviour. Destroying a handle does not destroy the objects made from it; each keeps what it needs
 *   alive (a model keeps its mesh, a sharded tensor its tensor), so handles may be destroyed in any order.
 * - "Collective" calls must be made by every rank of the mesh (or communicator), in the same order, with the
 *   same arguments. Before acting, the ranks of a collective call agree (one small all-gather): that they are at
 *   the same call (each call is numbered on its mesh, so a rank that failed a call and calls again never pairs with
 *   the others' first attempt), that each passed its own checks (handles, NULL pointers, values, its box), and that
 *   their arguments match (the model's kind, config, dtype, seed and a digest of its weights; the optimizer's
 *   settings; shapes; paths; the step count). Any difference is an error on every rank, the same status and
 *   message, naming the ranks and the differing argument, and nothing is done. With SHARDRT_AGREE_ERRORS set on the
 *   context, the ranks also agree on the outcome (a second all-gather): a call that fails on some ranks only
 *   returns the same status and message everywhere (the failing rank's, with the list of failing ranks). Without
 *   it, a failure inside the call on some ranks is returned there and the others fail when their next collective
 *   times out (SHARDRT_COMM_TIMEOUT seconds, SHARDRT_ERR_COMM; the mesh is unusable afterwards: its later
 *   collective calls fail at once, SHARDRT_ERR_COMM). A rank left waiting names the rank that failed: its message
 *   ends with "rank R failed this call (<status>): <its message>" when R returned an error, or "no word from rank R"
 *   when R died or hangs. Every agreement is bounded by SHARDRT_COMM_TIMEOUT + 2 s, and naming the failed rank
 *   takes at most 1.5 s more: when a rank fails, returns an error, dies or hangs anywhere inside a collective call,
 *   every other rank returns from it within SHARDRT_COMM_TIMEOUT + 3.5 s (+ its own compute). Only a handle that
 *   names no mesh (an invalid model or mesh handle itself) is returned on the calling rank alone, before any
 *   communication: pass the same handles on every rank.
 * - After MPI_Finalize, or once the context a handle was made from is destroyed, every call on it but its destroy
 *   returns SHARDRT_ERR_STATE with a message.
 * - Shapes and strides are int64_t arrays of `ndim` entries, in elements, in the caller's dimension order; dims are
 *   never reversed. Column-major (Fortran) memory is described by its strides (SHARDRT_LAYOUT_COL_MAJOR computes
 *   them), never transposed.
 * - Enumerations are passed as int (`dtype` a shardrt_dtype, `layout` a shardrt_layout), so that a wrong value
 *   from any language is a status, never undefined behaviour.
 * - Thread safety: handles of different models may be used from different threads; one handle must not be used by
 *   two threads at once. shardrt_last_error() is per thread.
 */
#ifndef SHARDRT_CAPI_SHARDRT_H
#define SHARDRT_CAPI_SHARDRT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARDRT_CAPI_VERSION 1

/* ---- status ------------------------------------------------------------------------------------------------- */

typedef enum shardrt_status {
  SHARDRT_OK = 0,
  SHARDRT_ERR_NULL_ARGUMENT = 1,   /* a required pointer argument is NULL */
  SHARDRT_ERR_INVALID_HANDLE = 2,  /* null, destroyed (stale generation), never created, or of another kind */
  SHARDRT_ERR_VALUE = 3,           /* a bad argument value: unknown name, negative size, bad JSON key, ... */
  SHARDRT_ERR_SHAPE = 4,           /* shapes, strides, extents or offsets that do not fit (incl. across ranks) */
  SHARDRT_ERR_DTYPE = 5,           /* unsupported or mismatched element type */
  SHARDRT_ERR_DEVICE = 6,          /* memory on a device this build or this mesh cannot use */
  SHARDRT_ERR_IO = 7,              /* a file missing, truncated, malformed, or for another model */
  SHARDRT_ERR_COMM = 8,            /* a collective failed or timed out (another rank failed or never came) */
  SHARDRT_ERR_COPY_FORBIDDEN = 9,  /* a copy was needed (dtype or layout) but the tensor forbids copies */
  SHARDRT_ERR_STATE = 10,          /* a call out of order: backward before forward, after MPI_Finalize, ranks at
                                      different calls */
  SHARDRT_ERR_INTERNAL = 11        /* anything else (out of memory, a bug): the message says what */
} shardrt_status;

/* The name of a status ("SHARDRT_ERR_SHAPE"); never NULL. Takes an int so that any value may be passed. */
const char* shardrt_status_name(int status);

/* The message of this thread's last failed call ("" when there was none). Valid until this thread's next call. */
const char* shardrt_last_error(void);
/* The status of this thread's last failed call (SHARDRT_OK when there was none). */
shardrt_status shardrt_last_status(void);
/* Copies the last message into buf (capacity `cap` bytes, NUL-terminated, truncated to fit) and returns its full
 * length without the NUL; for Fortran, which cannot keep a C pointer. buf may be NULL when cap is 0. */
size_t shardrt_last_error_copy(char* buf, size_t cap);
/* Forgets the last error of this thread. */
void shardrt_clear_error(void);

/* ---- handles ------------------------------------------------------------------------------------------------ */

typedef struct shardrt_context { uint64_t id; } shardrt_context;
typedef struct shardrt_mesh { uint64_t id; } shardrt_mesh;
typedef struct shardrt_tensor { uint64_t id; } shardrt_tensor;
typedef struct shardrt_sharded { uint64_t id; } shardrt_sharded;
typedef struct shardrt_model { uint64_t id; } shardrt_model;
typedef struct shardrt_optimizer { uint64_t id; } shardrt_optimizer;

/* ---- enums -------------------------------------------------------------------------------------------------- */

typedef enum shardrt_dtype {
  SHARDRT_F64 = 0,
  SHARDRT_F32 = 1,
  SHARDRT_BF16 = 2,
  SHARDRT_F16 = 3,
  SHARDRT_I64 = 4,
  SHARDRT_I32 = 5,
  SHARDRT_U8 = 6
} shardrt_dtype;

/* How shardrt_tensor_wrap computes strides when it is given none. */
typedef enum shardrt_layout {
  SHARDRT_LAYOUT_ROW_MAJOR = 0, /* C order: the last dim is contiguous */
  SHARDRT_LAYOUT_COL_MAJOR = 1  /* Fortran order: the first dim is contiguous */
} shardrt_layout;

/* Where a tensor's memory lives. */
#define SHARDRT_DEVICE_AUTO (-2) /* wrap: from the pointer (cudaPointerGetAttributes); mesh: node-local rank mod GPUs */
#define SHARDRT_DEVICE_CPU (-1)  /* host memory; a GPU index (0, 1, ...) otherwise */

/* Copy policy of a wrapped tensor (shardrt_tensor_wrap's `flags`). ShardRT never copies caller memory behind the
 * caller's back: a tensor is used in place when its dtype, device and layout suit the call. Where they do not (an
 * f64 field fed to an f32 model, a strided halo-skipping view that a model needs flattened), a copy is made and
 * counted (shardrt_tensor_copies, shardrt_context_copies) when the policy allows it, and the call fails with
 * SHARDRT_ERR_COPY_FORBIDDEN when it forbids it. */
#define SHARDRT_COPY_DEFAULT 0 /* the context's policy (SHARDRT_FORBID_COPIES or not) */
#define SHARDRT_COPY_ALLOW 1
#define SHARDRT_COPY_FORBID 2

/* Context flags (shardrt_context_create's `flags`, or-ed). */
#define SHARDRT_AGREE_ERRORS 1  /* collective calls agree on their status on every rank (see Conventions) */
#define SHARDRT_FORBID_COPIES 2 /* SHARDRT_COPY_DEFAULT means SHARDRT_COPY_FORBID */
/* Checked mode: the ranks agree on the signature of every collective of the context's meshes before it runs (a
 * mismatch is SHARDRT_ERR_COMM instead of garbage), and the replicated inputs of every forward, backward and
 * train_step are checked equal over their domain group (a mismatch is SHARDRT_ERR_VALUE naming the ranks). The
 * environment variable SHARDRT_COMM_CHECK=1 turns it on (=0 off) for every context, without a rebuild. */
#define SHARDRT_CHECKED 4

/* ---- context ------------------------------------------------------------------------------------------------ */

/* Creates a context on `comm` (collective over it; MPI_COMM_WORLD is the usual choice). When MPI is not initialised
 * yet, the first context initialises it (MPI_THREAD_FUNNELED) and the last context destroyed finalises it; when
 * the code initialised MPI itself (the usual case), ShardRT never finalises it. The context duplicates `comm` for
 * its own use. */
shardrt_status shardrt_context_create(shardrt_context* out, MPI_Comm comm, int flags);
/* The same with a Fortran communicator (MPI_Fint, e.g. MPI_COMM_WORLD of the mpi_f08 module's %MPI_VAL). */
shardrt_status shardrt_context_create_f(shardrt_context* out, MPI_Fint comm, int flags);
/* Ends the context: what was made from it (meshes, tensors, models, ...) then refuses every call but its destroy
 * (SHARDRT_ERR_STATE); destroy those too. Not collective. */
shardrt_status shardrt_context_destroy(shardrt_context ctx);
/* Copies made on behalf of this context's tensors so far (see the copy policy) and their bytes. */
shardrt_status shardrt_context_copies(shardrt_context ctx, int64_t* count, int64_t* bytes);

/* ---- mesh --------------------------------------------------------------------------------------------------- */

/* A ddp x domain mesh over `comm` (collective over it; its size must be ddp * domain; ddp = -1 infers it). Mesh
 * rank r has ddp coordinate r / domain and domain coordinate r % domain: a domain group is `domain` consecutive
 * ranks of comm, and holds one sample's subdomains. `device`: SHARDRT_DEVICE_AUTO (node-local rank mod GPU count,
 * or the CPU without GPUs), SHARDRT_DEVICE_CPU, or this rank's GPU index. */
shardrt_status shardrt_mesh_create(shardrt_mesh* out, shardrt_context ctx, MPI_Comm comm, int ddp, int domain,
                                   int device);
shardrt_status shardrt_mesh_create_f(shardrt_mesh* out, shardrt_context ctx, MPI_Fint comm, int ddp, int domain,
                                     int device);
shardrt_status shardrt_mesh_destroy(shardrt_mesh mesh);
/* This rank's coordinates and the mesh's sizes (any of the pointers may be NULL). */
shardrt_status shardrt_mesh_info(shardrt_mesh mesh, int* ddp_size, int* domain_size, int* ddp_index,
                                 int* domain_index);
/* What this mesh's communicators sent since its creation (or the last reset), from ShardRT's comm ledger, on this
 * rank: the number of calls and bytes sent of collectives of kind `kind` ("all_gather", "all_gather_v",
 * "all_reduce", "broadcast", "all_to_all_v", "send", ...; NULL: every kind). This is how a code asserts that no
 * rank ever gathered its field: the all_gather bytes stay far below the field's. */
shardrt_status shardrt_mesh_comm_counts(shardrt_mesh mesh, const char* kind, int64_t* calls, int64_t* bytes_sent);
shardrt_status shardrt_mesh_comm_reset(shardrt_mesh mesh);

/* ---- tensors: caller memory, wrapped zero-copy --------------------------------------------------------------- */

/* Wraps `ndim` (0..8) dims of caller memory at `data` without copying: element (i0, i1, ...) is at
 * data + sum_k i_k * strides[k] elements. strides NULL: computed from shape by `layout`. Strides must be >= 0 and
 * may skip memory (a halo, a component of an array of structs), but no two elements may share an address
 * (SHARDRT_ERR_SHAPE names the overlapping dims); a stride 0 is allowed only where the dim has extent <= 1.
 * `device`: SHARDRT_DEVICE_AUTO (from the pointer), SHARDRT_DEVICE_CPU or a GPU index (checked against the pointer
 * when ShardRT was built with CUDA; a GPU in a build without CUDA is SHARDRT_ERR_DEVICE). `flags`: a copy policy
 * (SHARDRT_COPY_*). `data` may be NULL only when the tensor has no elements (a zero-size subdomain). The memory
 * must stay valid for as long as the tensor or anything made from it is used. Not collective. */
shardrt_status shardrt_tensor_wrap(shardrt_tensor* out, shardrt_context ctx, void* data, int dtype, int ndim,
                                   const int64_t* shape, const int64_t* strides, int layout, int device, int flags);
shardrt_status shardrt_tensor_destroy(shardrt_tensor t);
/* ndim, then up to `cap` shape entries (shape may be NULL when cap is 0). */
shardrt_status shardrt_tensor_shape(shardrt_tensor t, int* ndim, int64_t* shape, int cap);
shardrt_status shardrt_tensor_dtype(shardrt_tensor t, shardrt_dtype* dtype);
/* 1 when the wrap is contiguous in row-major order (no copy is ever needed to flatten it). */
shardrt_status shardrt_tensor_is_contiguous(shardrt_tensor t, int* contiguous);
/* How many copies were made of (or back into) this tensor's memory so far, and their bytes. */
shardrt_status shardrt_tensor_copies(shardrt_tensor t, int64_t* count, int64_t* bytes);

/* ---- sharded tensors: this rank's subdomain of a global field ------------------------------------------------ */

/* Declares that `local` (this rank's piece, shape n[0..ndim-1]) is the box [offsets[k], offsets[k] + n[k]) of a
 * global tensor of `global_shape`. Collective over the mesh: one all-gather of (offsets, n) per rank (26 integers),
 * then every rank checks the same table and reaches the same verdict.
 *   dim 0 is the sample dim: the ranks of one domain group state the same samples, and the ddp groups split
 *     global_shape[0] among them in ddp order (offsets[0] = the group's first sample).
 *   the other dims are the sample's box: the `domain` ranks of a group must tile it exactly, each element held by
 *     exactly one rank (zero-size boxes allowed), and every ddp group alike. Boxes that overlap, leave a hole, or
 *     go outside the global shape are SHARDRT_ERR_SHAPE naming the ranks and their boxes; so is a global shape that
 *     differs between ranks.
 * The model sees the tensor as it is, split along at most one dim (slabs of a structured grid, a point set split
 * into contiguous ranges): the ranks' boxes in domain-rank order along it (offsets must increase with the domain
 * index).
 * Replicated: when every rank of the domain group states the whole sample box (offsets 0 and the global extents
 * in dims 1..; e.g. FLARE's time (B,), the ViT's class output (B, num_classes)), the tensor is replicated over the
 * domain group: every rank holds a copy. An input declared so must hold the same values on every rank of the group
 * (checked in checked mode, SHARDRT_CHECKED); an output or input grad declared so is written whole on every rank.
 * Halo cells of the code's arrays are skipped by wrapping only the interior: point `data` at the first interior
 * element and pass the strides of the whole array (with its halos) to shardrt_tensor_wrap; no copy is made. */
shardrt_status shardrt_sharded_create(shardrt_sharded* out, shardrt_mesh mesh, shardrt_tensor local, int ndim,
                                      const int64_t* global_shape, const int64_t* offsets);
/* The same for a point-set model (FLARE with fx (B, N, C)) on any block decomposition (1-D, 2-D or 3-D blocks of a
 * structured grid, or points): `local` is (samples, grid dims..., channels) with ndim >= 3, and the grid dims
 * 1..ndim-2 are flattened into one point dim: each rank's points in its own box's row-major order, the ranks in
 * domain-rank order, so no rank ever holds the global grid. The channels (last dim) must not be split. The
 * flattening is a view when the local tensor's strides allow it; otherwise (a halo-skipping view of a 2-D/3-D
 * block) every use goes through a buffer, counted as a copy under the tensor's copy policy (refused here with
 * SHARDRT_ERR_COPY_FORBIDDEN when it forbids copies). Outputs written into such a tensor come back in the same
 * layout, into the caller's memory. */
shardrt_status shardrt_sharded_create_points(shardrt_sharded* out, shardrt_mesh mesh, shardrt_tensor local,
                                             int ndim, const int64_t* global_shape, const int64_t* offsets);
shardrt_status shardrt_sharded_destroy(shardrt_sharded s);
/* The global shape as the model sees it (after any flattening): ndim, then up to `cap` entries. */
shardrt_status shardrt_sharded_global_shape(shardrt_sharded s, int* ndim, int64_t* shape, int cap);
/* 1 when every use of this sharded tensor goes through a copy of the caller's memory (a strided block flattened
 * into points by shardrt_sharded_create_points). */
shardrt_status shardrt_sharded_is_copy(shardrt_sharded s, int* copied);

/* ---- models ------------------------------------------------------------------------------------------------- */

/* Builds bundled model `kind` ("flare", "vit", "geotransolver") on `mesh` (collective). `config`: PhysicsNeMo's
 * constructor arguments as a JSON object, given either inline (text starting with '{') or as a file path.
 * `weights`: a .safetensors, PhysicsNeMo .mdlus or torch .pt/.pth file whose keys and shapes must match the model
 * exactly (a checkpoint of another model or config is SHARDRT_ERR_VALUE naming the keys; an .mdlus of another
 * PhysicsNeMo class SHARDRT_ERR_IO; a missing or malformed file SHARDRT_ERR_IO), or NULL/"" for the model's own
 * seeded initialisation (`seed`). `dtype`: SHARDRT_F32 or SHARDRT_F64 (parameters and
 * compute). Several models may live at once, on the same or different meshes. */
shardrt_status shardrt_model_create(shardrt_model* out, shardrt_mesh mesh, const char* kind, const char* config,
                                    const char* weights, int dtype, uint64_t seed);
shardrt_status shardrt_model_destroy(shardrt_model model);
/* The model's parameter count (elements, as PhysicsNeMo counts them). */
shardrt_status shardrt_model_num_parameters(shardrt_model model, int64_t* count);
/* Binds forward argument `name` (PhysicsNeMo's name: "fx", "embedding", "time" for FLARE; "x" for the ViT) to a
 * sharded tensor; bindings stay until replaced or cleared, so a code binds its fields once and calls forward or
 * train_step every step on the memory's current values. Not collective. */
shardrt_status shardrt_model_set_input(shardrt_model model, const char* name, shardrt_sharded input);
shardrt_status shardrt_model_clear_inputs(shardrt_model model);
/* Runs the model on the bound inputs (collective) and writes its output into `output`, a sharded tensor over the
 * caller's memory that must have the output's global shape and this rank's extents of it (the inputs' layout:
 * FLARE's output is split like fx). record_grad 0: inference, nothing kept for backward; 1: the graph is kept for
 * one shardrt_model_backward. */
shardrt_status shardrt_model_forward(shardrt_model model, shardrt_sharded output, int record_grad);
/* Backward of the last forward(record_grad = 1) with `grad_output` (laid out like the output): accumulates every
 * parameter's grad (summed over the domain group; when an optimizer is attached, into its arena, and its step
 * reduces them over ddp) and computes the grads of the floating inputs of that forward (read them with
 * shardrt_model_input_grad). One backward per forward. Collective. */
shardrt_status shardrt_model_backward(shardrt_model model, shardrt_sharded grad_output);
/* After backward: the grad of the input bound as `name` into `grad` (laid out like that input). Not collective. */
shardrt_status shardrt_model_input_grad(shardrt_model model, const char* name, shardrt_sharded grad);
/* Zeroes every parameter grad. */
shardrt_status shardrt_model_zero_grad(shardrt_model model);
/* Copies parameter or buffer `name` (its PhysicsNeMo state_dict key, e.g. "blocks.0.Attn.q_global") into `dst`, a
 * tensor of its shape (another floating dtype than the model's is a conversion, counted under dst's copy policy).
 * Parameters are whole on every rank. Not collective. */
shardrt_status shardrt_model_parameter(shardrt_model model, const char* name, shardrt_tensor dst);
/* The same for the grad of parameter `name` accumulated by shardrt_model_backward: whole on every rank, summed over
 * the domain group (over ddp it is summed by the optimizer step, not here); zero when no backward reached it. Only
 * while no optimizer is attached (an optimizer keeps the grads in its own arena and zeroes them at each step):
 * SHARDRT_ERR_STATE otherwise. Not collective. */
shardrt_status shardrt_model_parameter_grad(shardrt_model model, const char* name, shardrt_tensor dst);
/* Writes the model's parameters and buffers, keyed as PhysicsNeMo's state_dict, to `path` by its extension: .mdlus
 * (PhysicsNeMo's Module.from_checkpoint reads it), .safetensors or .pt. Collective: the parameters are whole on
 * every rank; mesh rank 0 writes (atomically: temporary file, fsync, rename). */
shardrt_status shardrt_model_export(shardrt_model model, const char* path);

/* ---- optimizers and in-situ training ------------------------------------------------------------------------ */

/* An optimizer over `model`'s parameters (collective; it takes over their storage, so create at most one per
 * model). `config`: JSON (inline or a file path) with the keys of shardrt-train's document (docs/training.md):
 *   {"optimizer": {"algorithm": "adamw"|"sgd"|"muon_adamw", "lr", "betas", "eps", "weight_decay", "momentum",
 *                  "nesterov", "muon_lr", "mode": "replicated"|"ddp"|"mesh", "max_grad_norm"},
 *    "schedule": {"kind": "constant"|"warmup_cosine"|"step"|"one_cycle", ...its arguments},
 *    "loss": {"kind": "mse"|"relative_l2"}, "steps": total steps (for the schedules that need it),
 *    "accumulation_steps": micro-batches per update}
 * Every key is optional (shardrt-train's defaults); an unknown key is SHARDRT_ERR_VALUE naming it. */
shardrt_status shardrt_optimizer_create(shardrt_optimizer* out, shardrt_model model, const char* config);
shardrt_status shardrt_optimizer_destroy(shardrt_optimizer opt);
/* One optimizer step on the grads accumulated by shardrt_model_backward (collective). */
shardrt_status shardrt_optimizer_step(shardrt_optimizer opt);
/* Steps taken so far (optimizer updates, restored by checkpoint load). */
shardrt_status shardrt_optimizer_steps(shardrt_optimizer opt, int64_t* steps);
/* One training step on the model's bound inputs against `target` (laid out like the output): forward, the
 * configured loss, backward, optimizer step (collective). The loss (identical on every rank) is written to
 * *loss_host, a host slot; on the CPU the call returns once it is written. */
shardrt_status shardrt_train_step(shardrt_optimizer opt, shardrt_sharded target, double* loss_host);

/* ---- checkpoints -------------------------------------------------------------------------------------------- */

/* Saves the optimizer's parameters, state and step count as a sharded checkpoint directory `dir` (collective;
 * each rank writes its own shard, committed atomically: a crash leaves the previous checkpoint intact). */
shardrt_status shardrt_checkpoint_save(shardrt_optimizer opt, const char* dir);
/* Loads one saved by any mesh shape and sharding mode (resharding as needed; collective); writes the step count
 * to *step (may be NULL). A checkpoint of another model is SHARDRT_ERR_IO naming the tensor. */
shardrt_status shardrt_checkpoint_load(shardrt_optimizer opt, const char* dir, int64_t* step);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDRT_CAPI_SHARDRT_H */
