// The C API against the C++ path: FLARE inference, backward (input grads) and train_step losses on the code's own
// uneven decomposition equal the serial C++ model's; block decompositions run as point sets (halos skipped by
// strides, through a counted copy or refused); .mdlus export and checkpoints round-trip; the ledger shows that no
// field was gathered.

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "optim/optimizer.h"
#include "patches/ops.h"
#include "tests/capi/capi_fixture.h"
#include "tests/support/world.h"

using namespace shardrt;
using namespace shardrt::capi_test;

extern "C" int shardrt_test_c99_program(MPI_Comm comm);

namespace {

constexpr int64_t kB = 2, kN = 13;

struct FlareInputs {
  Piece fx, emb;
  FlareInputs(const Session& s) : fx(s, kB, kN, 3, fx_value), emb(s, kB, kN, 2, emb_value) {}
  void bind(shardrt_model m) {
    CAPI_OK(shardrt_model_set_input(m, "fx", fx.sharded));
    CAPI_OK(shardrt_model_set_input(m, "embedding", emb.sharded));
  }
};

std::map<std::string, ShardTensor> oracle_inputs(const Oracle& o, bool grads, Tensor* fx_leaf = nullptr) {
  Tensor fx = whole(kB, kN, 3, fx_value), emb = whole(kB, kN, 2, emb_value);
  if (grads) set_requires_grad(fx);
  if (fx_leaf) *fx_leaf = fx;
  return {{"fx", o.input(fx)}, {"embedding", o.input(emb)}};
}

// |a - b| <= tol * (1 + |b|) for every element of this rank's piece against the whole oracle tensor.
void check_piece(const Piece& p, const Tensor& full, double tol) {
  const Tensor f = full.to(DType::f64).contiguous();
  const double* w = f.data<double>();
  double worst = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t i = 0; i < p.n; ++i)
      for (int64_t c = 0; c < p.C; ++c) {
        const double want = w[(b * p.N + p.offset + i) * p.C + c];
        worst = std::max(worst, std::abs(p.at(b, i, c) - want) / (1 + std::abs(want)));
      }
  INFO("rank " << world_rank() << " points [" << p.offset << ", " << p.offset + p.n << ")");
  CHECK(worst <= tol);
}

shardrt_model make_flare(const Session& s, uint64_t seed) {
  shardrt_model m{0};
  CAPI_OK(shardrt_model_create(&m, s.mesh, "flare", flare_config(), nullptr, SHARDRT_F64, seed));
  return m;
}

}  // namespace

TEST_CASE("capi: FLARE inference on uneven point ranges (a zero-size shard on 4 ranks) equals the serial C++ model, "
          "with no field gathered", "[capi]") {
  Session s;
  FlareInputs in(s);
  Piece out(s, kB, kN, 2);
  if (world_size() > 1) REQUIRE(in.fx.n < kN);  // sharding is active
  shardrt_model m = make_flare(s, 7);
  in.bind(m);
  CAPI_OK(shardrt_mesh_comm_reset(s.mesh));
  CAPI_OK(shardrt_model_forward(m, out.sharded, 0));

  Oracle o(7);
  const Tensor want = full_tensor(o.model->forward(oracle_inputs(o, false)).at(0));
  check_piece(out, want, 1e-12);
  double rms = 0;
  for (double v : want.to_vector()) rms += v * v;
  CHECK(rms > 1e-6);  // a nonzero output: the comparison means something

  // The forward's collectives: all-reduces of the attention's global-query statistics, never a gather of points.
  int64_t calls = -1, bytes = -1;
  CAPI_OK(shardrt_mesh_comm_counts(s.mesh, "all_gather", &calls, &bytes));
  CHECK(bytes == 0);
  CAPI_OK(shardrt_mesh_comm_counts(s.mesh, "all_gather_v", &calls, &bytes));
  CHECK(bytes == 0);
  CAPI_OK(shardrt_mesh_comm_counts(s.mesh, "all_to_all_v", &calls, &bytes));
  CHECK(bytes == 0);
  CAPI_OK(shardrt_mesh_comm_counts(s.mesh, nullptr, &calls, &bytes));
  if (world_size() > 1) CHECK(calls > 0);  // the domain-parallel attention did communicate
  int64_t copies = -1;
  CAPI_OK(shardrt_context_copies(s.ctx, &copies, nullptr));
  CHECK(copies == 0);  // f64 row-major pieces into an f64 model: used in place
  shardrt_model_destroy(m);
}

TEST_CASE("capi: backward with a given grad_output gives the serial input grads; f32 memory into an f64 model is a "
          "counted copy", "[capi]") {
  Session s;
  FlareInputs in(s);
  Piece out(s, kB, kN, 2), grad_out(s, kB, kN, 2, target_value), dfx(s, kB, kN, 3);
  shardrt_model m = make_flare(s, 11);
  in.bind(m);
  CAPI_OK(shardrt_model_forward(m, out.sharded, 1));
  CAPI_OK(shardrt_model_backward(m, grad_out.sharded));
  CAPI_OK(shardrt_model_input_grad(m, "fx", dfx.sharded));

  Oracle o(11);
  Tensor fx_leaf;
  const ShardTensor y = o.model->forward(oracle_inputs(o, true, &fx_leaf)).at(0);
  backward_global(y, whole(kB, kN, 2, target_value));
  check_piece(out, full_tensor(y), 1e-12);
  check_piece(dfx, grad_of(fx_leaf), 1e-11);

  // The same forward from an f32 copy of fx: allowed by default, counted once per use.
  std::vector<float> fx32(in.fx.data.begin(), in.fx.data.end());
  const int64_t shape[3] = {kB, in.fx.n, 3}, global[3] = {kB, kN, 3}, offs[3] = {0, in.fx.offset, 0};
  shardrt_tensor t32{0};
  shardrt_sharded s32{0};
  CAPI_OK(shardrt_tensor_wrap(&t32, s.ctx, fx32.data(), SHARDRT_F32, 3, shape, nullptr, SHARDRT_LAYOUT_ROW_MAJOR,
                              SHARDRT_DEVICE_CPU, SHARDRT_COPY_ALLOW));
  CAPI_OK(shardrt_sharded_create(&s32, s.mesh, t32, 3, global, offs));
  CAPI_OK(shardrt_model_set_input(m, "fx", s32));
  CAPI_OK(shardrt_model_forward(m, out.sharded, 0));
  int64_t copies = 0, bytes = 0;
  CAPI_OK(shardrt_tensor_copies(t32, &copies, &bytes));
  CHECK(copies == 1);
  CHECK(bytes == static_cast<int64_t>(fx32.size() * sizeof(float)));
  check_piece(out, full_tensor(y), 1e-6);  // fx rounded to f32
  shardrt_sharded_destroy(s32);
  shardrt_tensor_destroy(t32);
  shardrt_model_destroy(m);
}

TEST_CASE("capi: train_step losses over 4 AdamW steps equal the C++ optimizer path on the same data (mse), and "
          "relative_l2 is PhysicsNeMo's per-sample relative error", "[capi]") {
  Session s;
  FlareInputs in(s);
  Piece target(s, kB, kN, 2, target_value);
  shardrt_model m = make_flare(s, 5);
  in.bind(m);
  shardrt_optimizer opt{0};
  CAPI_OK(shardrt_optimizer_create(&opt, m, R"({"optimizer": {"algorithm": "adamw", "lr": 0.01, "weight_decay": 0.0},
                                               "loss": {"kind": "mse"}})"));
  std::vector<double> capi_losses(4);
  for (double& l : capi_losses) CAPI_OK(shardrt_train_step(opt, target.sharded, &l));
  int64_t steps = 0;
  CAPI_OK(shardrt_optimizer_steps(opt, &steps));
  CHECK(steps == 4);

  Oracle o(5);
  optim::OptimizerConfig oc;
  oc.algorithm = optim::Algorithm::adamw;
  oc.adamw.lr = 0.01, oc.adamw.beta1 = 0.9, oc.adamw.beta2 = 0.999, oc.adamw.eps = 1e-8, oc.adamw.weight_decay = 0;
  optim::Optimizer ref(o.self, *o.model, oc);
  const ShardTensor tgt = o.input(whole(kB, kN, 2, target_value));
  for (int k = 0; k < 4; ++k) {
    const ShardTensor loss = mse_loss(o.model->forward(oracle_inputs(o, false)).at(0), tgt);
    backward(loss.local());
    const double want = loss.local().item();
    ref.step();
    INFO("step " << k + 1);
    CHECK(std::abs(capi_losses[static_cast<size_t>(k)] - want) <= 1e-12 * std::abs(want));
  }
  CHECK(capi_losses[3] < capi_losses[0]);  // it trains
  shardrt_optimizer_destroy(opt);
  shardrt_model_destroy(m);

  // relative_l2 at the first step: mean over samples of ||p_b - t_b|| / ||t_b||, from the serial forward.
  shardrt_model m2 = make_flare(s, 9);
  in.bind(m2);
  shardrt_optimizer opt2{0};
  CAPI_OK(shardrt_optimizer_create(&opt2, m2, R"({"loss": {"kind": "relative_l2"}, "optimizer": {"algorithm": "sgd"}})"));
  double rel = 0;
  CAPI_OK(shardrt_train_step(opt2, target.sharded, &rel));
  Oracle o2(9);
  const Tensor p = full_tensor(o2.model->forward(oracle_inputs(o2, false)).at(0)).contiguous();
  const Tensor t = whole(kB, kN, 2, target_value);
  double want = 0;
  for (int64_t b = 0; b < kB; ++b) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < kN * 2; ++i) {
      const double d = p.data<double>()[b * kN * 2 + i] - t.data<double>()[b * kN * 2 + i];
      num += d * d, den += t.data<double>()[b * kN * 2 + i] * t.data<double>()[b * kN * 2 + i];
    }
    want += std::sqrt(num / den) / kB;
  }
  CHECK(std::abs(rel - want) <= 1e-12 * want);
  shardrt_optimizer_destroy(opt2);
  shardrt_model_destroy(m2);
}

TEST_CASE("capi: a block decomposition of a grid with halos runs as a point set (a counted copy), equal to the "
          "serial model on the same point order; forbidding the copy is refused", "[capi]") {
  // An H x W grid split into px x py blocks (uneven); each rank stores its block with a halo of 1 cell around it.
  const int P = world_size();
  const int px = P == 4 ? 2 : 1, py = P / px;
  const int64_t H = 5, W = 6;
  const std::vector<int64_t> rows = px == 1 ? std::vector<int64_t>{H} : std::vector<int64_t>{3, 2};
  const std::vector<int64_t> cols = py == 1 ? std::vector<int64_t>{W} : py == 2 ? std::vector<int64_t>{4, 2}
                                                                                : std::vector<int64_t>{2, 1, 3};
  const int bx = world_rank() / py, by = world_rank() % py;
  int64_t r0 = 0, c0 = 0;
  for (int i = 0; i < bx; ++i) r0 += rows[static_cast<size_t>(i)];
  for (int j = 0; j < by; ++j) c0 += cols[static_cast<size_t>(j)];
  const int64_t h = rows[static_cast<size_t>(bx)], w = cols[static_cast<size_t>(by)];
  auto grid_fx = [&](int64_t gi, int64_t gj, int64_t c) { return fx_value(0, gi * W + gj, c); };
  auto grid_emb = [&](int64_t gi, int64_t gj, int64_t c) { return c == 0 ? double(gi) / H : double(gj) / W; };

  Session s;
  // Halo'd arrays (h+2) x (w+2) x C; the interior starts at (1, 1).
  std::vector<double> fx_mem(static_cast<size_t>((h + 2) * (w + 2) * 3), -99.0),
      emb_mem(static_cast<size_t>((h + 2) * (w + 2) * 2), -99.0), out_mem(static_cast<size_t>(h * w * 2), 0.0);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < w; ++j) {
      for (int64_t c = 0; c < 3; ++c) fx_mem[static_cast<size_t>(((i + 1) * (w + 2) + j + 1) * 3 + c)] = grid_fx(r0 + i, c0 + j, c);
      for (int64_t c = 0; c < 2; ++c) emb_mem[static_cast<size_t>(((i + 1) * (w + 2) + j + 1) * 2 + c)] = grid_emb(r0 + i, c0 + j, c);
    }
  auto wrap_interior = [&](std::vector<double>& mem, int64_t C, int flags, shardrt_tensor* t) {
    const int64_t shape[4] = {1, h, w, C}, strides[4] = {(h + 2) * (w + 2) * C, (w + 2) * C, C, 1};
    return shardrt_tensor_wrap(t, s.ctx, mem.data() + ((w + 2) + 1) * C, SHARDRT_F64, 4, shape, strides,
                               SHARDRT_LAYOUT_ROW_MAJOR, SHARDRT_DEVICE_CPU, flags);
  };
  const int64_t offs[4] = {0, r0, c0, 0};
  shardrt_tensor tfx{0}, temb{0}, tout{0};
  shardrt_sharded sfx{0}, semb{0}, sout{0};
  CAPI_OK(wrap_interior(fx_mem, 3, SHARDRT_COPY_ALLOW, &tfx));
  CAPI_OK(wrap_interior(emb_mem, 2, SHARDRT_COPY_ALLOW, &temb));
  const int64_t gfx[4] = {1, H, W, 3}, gemb[4] = {1, H, W, 2}, gout[4] = {1, H, W, 2};
  CAPI_OK(shardrt_sharded_create_points(&sfx, s.mesh, tfx, 4, gfx, offs));
  CAPI_OK(shardrt_sharded_create_points(&semb, s.mesh, temb, 4, gemb, offs));
  const int64_t oshape[4] = {1, h, w, 2};
  CAPI_OK(shardrt_tensor_wrap(&tout, s.ctx, out_mem.data(), SHARDRT_F64, 4, oshape, nullptr, SHARDRT_LAYOUT_ROW_MAJOR,
                              SHARDRT_DEVICE_CPU, SHARDRT_COPY_FORBID));
  CAPI_OK(shardrt_sharded_create_points(&sout, s.mesh, tout, 4, gout, offs));
  int copied = -1, nd = 0;
  int64_t gshape[8];
  CAPI_OK(shardrt_sharded_is_copy(sfx, &copied));
  // The halo columns interrupt the rows: the interior cannot be flattened in place, unless the block is one column
  // wide (3 ranks: columns 2 | 1 | 3), whose rows are then one stride apart.
  const int needs_copy = w > 1 ? 1 : 0;
  CHECK(copied == needs_copy);
  CAPI_OK(shardrt_sharded_is_copy(sout, &copied));
  CHECK(copied == 0);  // a contiguous block flattens in place
  CAPI_OK(shardrt_sharded_global_shape(sfx, &nd, gshape, 8));
  CHECK(nd == 3);
  CHECK(gshape[1] == H * W);

  shardrt_model m = make_flare(s, 3);
  CAPI_OK(shardrt_model_set_input(m, "fx", sfx));
  CAPI_OK(shardrt_model_set_input(m, "embedding", semb));
  CAPI_OK(shardrt_model_forward(m, sout, 0));
  int64_t copies = 0;
  CAPI_OK(shardrt_tensor_copies(tfx, &copies, nullptr));
  CHECK(copies == needs_copy);

  // The oracle on the points in the same order: block by block in rank order, each block row-major.
  Tensor fx_all = Tensor::empty({1, H * W, 3}, DType::f64), emb_all = Tensor::empty({1, H * W, 2}, DType::f64);
  int64_t k = 0, my_first = 0;
  for (int q = 0; q < P; ++q) {
    const int qx = q / py, qy = q % py;
    int64_t qr = 0, qc = 0;
    for (int i = 0; i < qx; ++i) qr += rows[static_cast<size_t>(i)];
    for (int j = 0; j < qy; ++j) qc += cols[static_cast<size_t>(j)];
    if (q == world_rank()) my_first = k;
    for (int64_t i = 0; i < rows[static_cast<size_t>(qx)]; ++i)
      for (int64_t j = 0; j < cols[static_cast<size_t>(qy)]; ++j, ++k) {
        for (int64_t c = 0; c < 3; ++c) fx_all.data<double>()[k * 3 + c] = grid_fx(qr + i, qc + j, c);
        for (int64_t c = 0; c < 2; ++c) emb_all.data<double>()[k * 2 + c] = grid_emb(qr + i, qc + j, c);
      }
  }
  Oracle o(3);
  const Tensor want = full_tensor(o.model->forward({{"fx", o.input(fx_all)}, {"embedding", o.input(emb_all)}}).at(0));
  double worst = 0;
  for (int64_t p = 0; p < h * w * 2; ++p)
    worst = std::max(worst, std::abs(out_mem[static_cast<size_t>(p)] - want.data<double>()[my_first * 2 + p]));
  CHECK(worst <= 1e-12);
  for (size_t i = 0; i < fx_mem.size(); i += 3 * static_cast<size_t>(w + 2))  // the halo column was never touched
    CHECK(fx_mem[i] == -99.0);

  // The same halo'd fx with copies forbidden: refused when the copy would be needed, on every rank alike.
  shardrt_tensor tno{0};
  shardrt_sharded sno{0};
  CAPI_OK(wrap_interior(fx_mem, 3, SHARDRT_COPY_FORBID, &tno));
  const shardrt_status st = shardrt_sharded_create_points(&sno, s.mesh, tno, 4, gfx, offs);
  CHECK(shardrt_status_name(st) == std::string("SHARDRT_ERR_COPY_FORBIDDEN"));
  CHECK(std::string(shardrt_last_error()).find("SHARDRT_COPY_FORBID") != std::string::npos);
  CHECK(sno.id == 0);
  shardrt_sharded_destroy(sno);
  shardrt_tensor_destroy(tno);
  for (shardrt_sharded x : {sfx, semb, sout}) shardrt_sharded_destroy(x);
  for (shardrt_tensor x : {tfx, temb, tout}) shardrt_tensor_destroy(x);
  shardrt_model_destroy(m);
}

TEST_CASE("capi: .mdlus export loads back into an identical model; a checkpoint resumes training exactly", "[capi]") {
  Session s;
  FlareInputs in(s);
  Piece target(s, kB, kN, 2, target_value), out_a(s, kB, kN, 2), out_b(s, kB, kN, 2);
  // A folder of this job's own (mkdtemp): capi_np1..4, and other checkouts' suites on the same machine, save and
  // remove theirs at the same time.
  shardrt::test::SharedTempDir tmp("shardrt_capi_test");
  const std::string& dir = tmp.path;
  const std::string mdlus = dir + "/flare.mdlus", ckpt = dir + "/ckpt";

  shardrt_model m = make_flare(s, 21);
  in.bind(m);
  shardrt_optimizer opt{0};
  CAPI_OK(shardrt_optimizer_create(&opt, m, R"({"optimizer": {"lr": 0.01},
      "schedule": {"kind": "warmup_cosine", "warmup_steps": 2}, "steps": 6})"));
  double loss = 0;
  for (int k = 0; k < 2; ++k) CAPI_OK(shardrt_train_step(opt, target.sharded, &loss));
  CAPI_OK(shardrt_checkpoint_save(opt, ckpt.c_str()));
  std::vector<double> first(2), again(2);
  for (double& l : first) CAPI_OK(shardrt_train_step(opt, target.sharded, &l));
  int64_t step = -1;
  CAPI_OK(shardrt_checkpoint_load(opt, ckpt.c_str(), &step));
  CHECK(step == 2);
  for (double& l : again) CAPI_OK(shardrt_train_step(opt, target.sharded, &l));
  CHECK(again == first);  // bit for bit: parameters, AdamW state and the schedule's position restored

  CAPI_OK(shardrt_model_export(m, mdlus.c_str()));
  CAPI_OK(shardrt_model_forward(m, out_a.sharded, 0));
  shardrt_model back{0};
  CAPI_OK(shardrt_model_create(&back, s.mesh, "flare", flare_config(), mdlus.c_str(), SHARDRT_F64, 999));
  in.bind(back);
  CAPI_OK(shardrt_model_forward(back, out_b.sharded, 0));
  CHECK(out_a.data == out_b.data);
  shardrt_model_destroy(back);
  shardrt_optimizer_destroy(opt);
  shardrt_model_destroy(m);
}

TEST_CASE("capi: on a 2 x 2 ddp x domain mesh each ddp group trains on its own sample; the losses equal the serial "
          "C++ path on the whole batch", "[capi]") {
  if (world_size() != 4) return;  // the 2 x 2 mesh needs exactly 4 ranks
  Session s(SHARDRT_AGREE_ERRORS, /*ddp=*/2);
  int ddp_index = -1, domain_index = -1;
  CAPI_OK(shardrt_mesh_info(s.mesh, nullptr, nullptr, &ddp_index, &domain_index));
  // Sample b = ddp_index; its points split 5 | 8 over the domain pair.
  const int64_t N = 13, first = domain_index == 0 ? 0 : 5, n = domain_index == 0 ? 5 : 8;
  auto local = [&](int64_t C, double (*f)(int64_t, int64_t, int64_t)) {
    std::vector<double> v(static_cast<size_t>(n * C));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c) v[static_cast<size_t>(i * C + c)] = f(ddp_index, first + i, c);
    return v;
  };
  std::vector<double> fx = local(3, fx_value), emb = local(2, emb_value), tgt = local(2, target_value);
  std::vector<shardrt_tensor> tensors;
  auto make = [&](std::vector<double>& mem, int64_t C) {
    shardrt_tensor t{0};
    shardrt_sharded x{0};
    const int64_t shape[3] = {1, n, C}, global[3] = {2, N, C}, offs[3] = {ddp_index, first, 0};
    CAPI_OK(shardrt_tensor_wrap(&t, s.ctx, mem.data(), SHARDRT_F64, 3, shape, nullptr, SHARDRT_LAYOUT_ROW_MAJOR,
                                SHARDRT_DEVICE_CPU, 0));
    CAPI_OK(shardrt_sharded_create(&x, s.mesh, t, 3, global, offs));
    tensors.push_back(t);
    return x;
  };
  const shardrt_sharded sfx = make(fx, 3), semb = make(emb, 2), stgt = make(tgt, 2);
  shardrt_model m = make_flare(s, 13);
  CAPI_OK(shardrt_model_set_input(m, "fx", sfx));
  CAPI_OK(shardrt_model_set_input(m, "embedding", semb));
  shardrt_optimizer opt{0};
  CAPI_OK(shardrt_optimizer_create(&opt, m, R"({"optimizer": {"lr": 0.01, "weight_decay": 0.0, "mode": "ddp"}})"));
  std::vector<double> losses(3);
  for (double& l : losses) CAPI_OK(shardrt_train_step(opt, stgt, &l));

  Oracle o(13);
  optim::OptimizerConfig oc;
  oc.adamw.lr = 0.01, oc.adamw.beta1 = 0.9, oc.adamw.beta2 = 0.999, oc.adamw.eps = 1e-8, oc.adamw.weight_decay = 0;
  optim::Optimizer ref(o.self, *o.model, oc);
  const ShardTensor t = o.input(whole(kB, N, 2, target_value));
  for (int k = 0; k < 3; ++k) {
    const ShardTensor loss = mse_loss(o.model->forward(oracle_inputs(o, false)).at(0), t);
    backward(loss.local());
    const double want = loss.local().item();
    ref.step();
    INFO("step " << k + 1 << " on ddp group " << ddp_index);
    CHECK(std::abs(losses[static_cast<size_t>(k)] - want) <= 1e-12 * std::abs(want));
  }
  for (shardrt_sharded x : {sfx, semb, stgt}) shardrt_sharded_destroy(x);
  for (shardrt_tensor x : tensors) shardrt_tensor_destroy(x);
  shardrt_optimizer_destroy(opt);
  shardrt_model_destroy(m);
}

TEST_CASE("capi: shardrt.h compiles as C99 and a C program drives the API (tests/capi/c99_program.c)", "[capi]") {
  const int failed_at = shardrt_test_c99_program(MPI_COMM_WORLD);
  INFO("the C program failed at its check " << failed_at << ": " << shardrt_last_error());
  CHECK(failed_at == 0);
}
