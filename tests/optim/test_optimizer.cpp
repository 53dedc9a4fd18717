// The optimizer on one rank: arenas and binding, every update rule against its closed form in fp64 over several
// steps, clipping, accumulation, mixed precision, schedules against PyTorch's numbers, bad input.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "runtime/errors.h"
#include "tests/optim/optim_testing.h"

using namespace shardrt;
using namespace shardrt::optim;
using namespace shardrt::test;

namespace {
Mesh self_mesh() { return Mesh(MPI_COMM_SELF, 1, 1); }
constexpr double kExact = 1e-13;
}  // namespace

TEST_CASE("arena layout: offsets in order, padded to the shards, whole slots never straddle a shard",
          "[optim][arena]") {
  const std::vector<SlotRequest> req = {{"a", {3}, false}, {"m", {2, 3}, true}, {"c", {4}, false}};
  const ArenaLayout one = plan_layout(req, 1);
  CHECK(one.shard_numel == 13);
  CHECK(one.slots[1].offset == 3);
  CHECK(one.slots[2].offset == 9);
  const ArenaLayout four = plan_layout(req, 4);
  // ceil(13 / 4) = 4 < 6 (the matrix): the shard grows to 6; the matrix moves from 3 to the start of shard 1.
  CHECK(four.shard_numel >= 6);
  CHECK(four.total() == four.shard_numel * 4);
  for (size_t i = 0; i < four.slots.size(); ++i)
    if (four.slots[i].whole) {
      const int first = four.owner(i);
      CHECK((four.slots[i].offset + four.slots[i].numel - 1) / four.shard_numel == first);
    }
  CHECK(four.slots[0].offset == 0);
  CHECK(four.slots[1].offset == four.shard_numel);
  CHECK(four.slots[2].offset == four.shard_numel + 6);
  const std::vector<SlotRequest> flat = {{"a", {5}, false}, {"b", {6}, false}};
  CHECK(plan_layout(flat, 3).shard_numel == 4);  // 11 elements -> 3 x 4, one padding element
  CHECK_THROWS_AS(plan_layout(flat, 0), ValueError);
}

TEST_CASE("the optimizer owns parameter and grad storage: parameters are arena views, backward accumulates into the "
          "grad arena",
          "[optim][arena]") {
  ToyParams m;
  const auto before = values(m);
  OptimizerConfig cfg;
  Optimizer opt(self_mesh(), m, cfg);
  REQUIRE(opt.num_groups() == 1);
  const auto& arena = opt.param_arena(0);
  const auto& grads = opt.grad_arena(0);
  const ArenaLayout& L = opt.layout(0);
  CHECK(values(m) == before);  // values moved in unchanged
  const auto named = m.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const char* base = static_cast<const char*>(arena.buffer().raw_data());
    CHECK(named[i].second.raw_data() == base + L.slots[i].offset * 8);
    CHECK(requires_grad(named[i].second));
    CHECK(grad_of(named[i].second).raw_data() == static_cast<const char*>(grads.buffer().raw_data()) + L.slots[i].offset * 8);
  }
  // y = sum(w * 2) + sum(w * 3): two uses, both accumulated into the same arena slot in place.
  const Tensor y = add(sum(mul_scalar(m.w, 2.0)), sum(mul_scalar(m.w, 3.0)));
  backward(y);
  const auto g = opt.grad_arena(0).view(L.slots[0]).to_vector();
  for (double x : g) CHECK(x == 5.0);
  CHECK(grad_of(m.b).to_vector() == std::vector<double>(5, 0.0));
  opt.zero_grad();
  for (double x : grad_of(m.w).to_vector()) CHECK(x == 0.0);
  const OptimizerMemory mem = opt.memory();
  CHECK(mem.num_parameters == 15 + 5 + 8 + 1);
  CHECK(mem.params == L.total() * 8);
  CHECK(mem.grads == L.total() * 8);
  CHECK(mem.state == 2 * L.shard_numel * 8);
}

TEST_CASE("AdamW: PyTorch's update (bias correction, decoupled weight decay) over several steps, fp64",
          "[optim][adamw]") {
  ToyParams m;
  OptimizerConfig cfg;
  cfg.adamw = {.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
  Optimizer opt(self_mesh(), m, cfg);
  auto p = values(m);
  std::vector<RefAdamW> ref(p.size(), RefAdamW{0.05, 0.8, 0.95, 1e-6, 0.1, {}, {}});
  for (int t = 1; t <= 4; ++t) {
    const auto g = set_grads(m, 100 + t);
    CHECK(opt.step());
    for (size_t i = 0; i < p.size(); ++i) ref[i].step(p[i], g[i], t, 0.05);
    const auto got = values(m);
    for (size_t i = 0; i < p.size(); ++i) CHECK(max_abs_diff(got[i], p[i]) < kExact);
    // Grads are zeroed by the step.
    CHECK(grad_of(m.w).to_vector() == std::vector<double>(15, 0.0));
  }
  const auto ea = opt.state_shard(0, "exp_avg").to_vector();
  CHECK(std::fabs(ea[opt.layout(0).slots[1].offset] - ref[1].m[0]) < kExact);
}

TEST_CASE("AdamW's first step without decay moves every element by lr * g / (|g| + eps)", "[optim][adamw]") {
  ToyParams m;
  OptimizerConfig cfg;
  cfg.adamw = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0};
  Optimizer opt(self_mesh(), m, cfg);
  const auto p0 = values(m);
  const auto g = set_grads(m, 5);
  opt.step();
  const auto p1 = values(m);
  for (size_t i = 0; i < p0.size(); ++i)
    for (size_t k = 0; k < p0[i].size(); ++k)
      CHECK(std::fabs(p1[i][k] - (p0[i][k] - 0.01 * g[i][k] / (std::fabs(g[i][k]) + 1e-8))) < kExact);
}

TEST_CASE("SGD: plain, momentum with dampening, Nesterov, weight decay; several steps, fp64", "[optim][sgd]") {
  const std::vector<SGDOptions> cases = {{.lr = 0.1},
                                         {.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
                                         {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true}};
  for (const SGDOptions& o : cases) {
    ToyParams m;
    OptimizerConfig cfg;
    cfg.algorithm = Algorithm::sgd;
    cfg.sgd = o;
    Optimizer opt(self_mesh(), m, cfg);
    auto p = values(m);
    std::vector<std::vector<double>> buf(p.size());
    for (int t = 1; t <= 3; ++t) {
      const auto g = set_grads(m, 200 + t);
      opt.step();
      for (size_t i = 0; i < p.size(); ++i) {
        if (buf[i].empty()) buf[i].assign(p[i].size(), 0);
        for (size_t k = 0; k < p[i].size(); ++k) {
          double d = g[i][k] + o.weight_decay * p[i][k];
          if (o.momentum != 0) {
            buf[i][k] = t == 1 ? d : o.momentum * buf[i][k] + (1 - o.dampening) * d;
            d = o.nesterov ? d + o.momentum * buf[i][k] : buf[i][k];
          }
          p[i][k] -= o.lr * d;
        }
      }
      const auto got = values(m);
      INFO("momentum " << o.momentum << " nesterov " << o.nesterov << " step " << t);
      for (size_t i = 0; i < p.size(); ++i) CHECK(max_abs_diff(got[i], p[i]) < kExact);
    }
  }
}

TEST_CASE("Newton-Schulz: on a diagonal matrix each singular value follows the scalar quintic a x + b x^3 + c x^5",
          "[optim][muon]") {
  // diag(3, 4) in a 2 x 3 matrix: Frobenius norm 5, so the singular values start at 0.6 and 0.8.
  std::vector<double> x = {3, 0, 0, 0, 4, 0};
  MuonOptions o;
  newton_schulz(x.data(), 2, 3, o);
  double s0 = 0.6, s1 = 0.8;
  auto poly = [&](double s) { return o.a * s + o.b * s * s * s + o.c * s * s * s * s * s; };
  for (int k = 0; k < 5; ++k) s0 = poly(s0), s1 = poly(s1);
  CHECK(std::fabs(x[0] - s0) < 1e-14);
  CHECK(std::fabs(x[4] - s1) < 1e-14);
  for (int i : {1, 2, 3, 5}) CHECK(x[i] == 0.0);
  // The same matrix transposed (3 x 2, the tall orientation) gives the transposed result.
  std::vector<double> t = {3, 0, 0, 4, 0, 0};
  newton_schulz(t.data(), 3, 2, o);
  CHECK(std::fabs(t[0] - s0) < 1e-14);
  CHECK(std::fabs(t[3] - s1) < 1e-14);
  CHECK(muon_adjusted_lr(0.1, 4, 2, MuonLrAdjust::original) == Approx(0.1 * std::sqrt(2.0)));
  CHECK(muon_adjusted_lr(0.1, 2, 4, MuonLrAdjust::original) == Approx(0.1));
  CHECK(muon_adjusted_lr(0.1, 4, 9, MuonLrAdjust::match_rms_adamw) == Approx(0.1 * 0.2 * 3));
}

TEST_CASE("Muon on the 2-D weights, AdamW on the rest (the Darcy recipe), several steps, fp64", "[optim][muon]") {
  for (bool nesterov : {true, false}) {
    ToyParams m;
    OptimizerConfig cfg;
    cfg.algorithm = Algorithm::muon_adamw;
    cfg.muon = {.lr = 0.02, .weight_decay = 0.1, .momentum = 0.9, .nesterov = nesterov};
    cfg.muon.adjust = MuonLrAdjust::match_rms_adamw;
    cfg.adamw = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.05};
    Optimizer opt(self_mesh(), m, cfg);
    auto p = values(m);
    const std::vector<std::vector<int>> dims = {{3, 5}, {5}, {4, 2}, {1}};
    std::vector<std::vector<double>> buf(p.size());
    std::vector<RefAdamW> adam(p.size(), RefAdamW{0.01, 0.9, 0.99, 1e-8, 0.05, {}, {}});
    for (int t = 1; t <= 3; ++t) {
      const auto g = set_grads(m, 300 + t);
      opt.step();
      for (size_t i = 0; i < p.size(); ++i) {
        if (dims[i].size() != 2) {
          adam[i].step(p[i], g[i], t, 0.01);
          continue;
        }
        if (buf[i].empty()) buf[i].assign(p[i].size(), 0);
        std::vector<double> u(p[i].size());
        for (size_t k = 0; k < u.size(); ++k) {
          buf[i][k] = 0.9 * buf[i][k] + 0.1 * g[i][k];
          u[k] = nesterov ? g[i][k] + 0.9 * (buf[i][k] - g[i][k]) : buf[i][k];
        }
        const auto o = ref_newton_schulz(u, dims[i][0], dims[i][1]);
        const double lr = 0.02 * 0.2 * std::sqrt(std::max(dims[i][0], dims[i][1]));
        for (size_t k = 0; k < u.size(); ++k) p[i][k] = p[i][k] * (1 - 0.02 * 0.1) - lr * o[k];
      }
      const auto got = values(m);
      INFO("nesterov " << nesterov << " step " << t);
      for (size_t i = 0; i < p.size(); ++i) CHECK(max_abs_diff(got[i], p[i]) < kExact);
    }
  }
}

TEST_CASE("global-norm clipping: grads scaled by max_norm / (norm + 1e-6) only when the norm exceeds it",
          "[optim][clip]") {
  for (double max_norm : {0.5, 1e6}) {
    ToyParams m;
    OptimizerConfig cfg;
    cfg.algorithm = Algorithm::sgd;
    cfg.sgd = {.lr = 1.0};
    cfg.max_grad_norm = max_norm;
    Optimizer opt(self_mesh(), m, cfg);
    auto p = values(m);
    const auto g = set_grads(m, 11);
    double sq = 0;
    for (const auto& gi : g)
      for (double x : gi) sq += x * x;
    const double norm = std::sqrt(sq), coef = std::min(1.0, max_norm / (norm + 1e-6));
    opt.step();
    CHECK(opt.last_grad_norm() == Approx(norm).epsilon(1e-14));
    const auto got = values(m);
    for (size_t i = 0; i < p.size(); ++i)
      for (size_t k = 0; k < p[i].size(); ++k) CHECK(std::fabs(got[i][k] - (p[i][k] - coef * g[i][k])) < kExact);
  }
}

TEST_CASE("gradient accumulation: k micro-batches summed in the arena, one update with their mean", "[optim]") {
  ToyParams m;
  OptimizerConfig cfg;
  cfg.adamw = {.lr = 0.05, .weight_decay = 0.0};
  cfg.accumulation_steps = 3;
  Optimizer opt(self_mesh(), m, cfg);
  auto p = values(m);
  std::vector<std::vector<double>> mean(p.size());
  for (int micro = 0; micro < 3; ++micro) {
    // backward adds into the bound grads: y = sum(w * c) puts c into every element of w's grad.
    const double c = 1.0 + micro;
    backward(sum(mul_scalar(m.w, c)));
    backward(sum(mul_scalar(m.s, -c)));
    CHECK(opt.step() == (micro == 2));
    if (micro < 2) CHECK(values(m) == p);
  }
  std::vector<RefAdamW> ref(p.size(), RefAdamW{0.05, 0.9, 0.999, 1e-8, 0.0, {}, {}});
  std::vector<std::vector<double>> g = {std::vector<double>(15, 2.0), std::vector<double>(5, 0.0),
                                        std::vector<double>(8, 0.0), std::vector<double>(1, -2.0)};
  for (size_t i = 0; i < p.size(); ++i) ref[i].step(p[i], g[i], 1, 0.05);
  const auto got = values(m);
  for (size_t i = 0; i < p.size(); ++i) CHECK(max_abs_diff(got[i], p[i]) < kExact);
  CHECK(opt.steps_taken() == 1);
}

TEST_CASE("mixed precision: bf16 parameters and grads, f32 master weights and state, one rounding per step",
          "[optim][precision]") {
  for (DType low : {DType::bf16, DType::f16}) {
    ToyParams m(low);
    OptimizerConfig cfg;
    cfg.adamw = {.lr = 0.01, .weight_decay = 0.01};
    Optimizer opt(self_mesh(), m, cfg);
    CHECK(opt.param_arena(0).buffer().dtype() == low);
    CHECK(opt.grad_arena(0).buffer().dtype() == low);
    CHECK(opt.state_shard(0, "exp_avg").dtype() == DType::f32);
    const OptimizerMemory mem = opt.memory();
    const int64_t n = opt.layout(0).total();
    CHECK(mem.params == 2 * n);
    CHECK(mem.master == 4 * n);
    CHECK(mem.state == 8 * n);
    // An f32 AdamW on the f32 master; the bf16 parameters are its rounding.
    std::vector<std::vector<float>> master;
    for (auto& v : values(m)) master.emplace_back(v.begin(), v.end());
    std::vector<std::vector<float>> mm(master.size()), vv(master.size());
    for (int t = 1; t <= 3; ++t) {
      // Grads through the engine too: a bf16 leaf grad accumulates in f32 and rounds once.
      const auto g = set_grads(m, 400 + t);
      opt.step();
      for (size_t i = 0; i < master.size(); ++i) {
        std::vector<float> mf(master[i].size()), vf(master[i].size());
        if (mm[i].empty()) mm[i].assign(master[i].size(), 0.f), vv[i].assign(master[i].size(), 0.f);
        for (size_t k = 0; k < master[i].size(); ++k) {
          const float gk = static_cast<float>(g[i][k]);
          master[i][k] *= static_cast<float>(1 - 0.01 * 0.01);
          mm[i][k] = 0.9f * mm[i][k] + (1 - 0.9f) * gk;
          vv[i][k] = 0.999f * vv[i][k] + (1 - 0.999f) * gk * gk;
          const float step = static_cast<float>(0.01 / (1 - std::pow(0.9, t)));
          const float bc2 = static_cast<float>(std::sqrt(1 - std::pow(0.999, t)));
          master[i][k] -= step * mm[i][k] / (std::sqrt(vv[i][k]) / bc2 + 1e-8f);
        }
      }
      const auto got = values(m);
      for (size_t i = 0; i < master.size(); ++i)
        for (size_t k = 0; k < master[i].size(); ++k) {
          const double rounded = from_vector({master[i][k]}, {1}, {DType::f32}).to(low).to_vector()[0];
          CHECK(std::fabs(got[i][k] - rounded) <= 1e-6 * std::fabs(rounded));
        }
    }
    // Engine accumulation into a low-precision bound grad (the f32 compute cast back by to_dtype's backward):
    // 0.5 + 0.25 in f32, one rounding.
    backward(sum(mul_scalar(to_dtype(m.b, DType::f32), 0.5)));
    backward(sum(mul_scalar(to_dtype(m.b, DType::f32), 0.25)));
    for (double x : grad_of(m.b).to_vector()) CHECK(x == 0.75);
  }
}

TEST_CASE("schedules: PyTorch's lr_scheduler values (LinearLR+CosineAnnealingLR, StepLR, OneCycleLR, LambdaLR)",
          "[optim][schedule]") {
  // Printed by torch 2.15 (the golden venv): the lr of each of the first steps with base lr 1.
  const std::vector<double> warm = {0.01, 0.34, 0.67, 1.0, 0.9554359905560885, 0.83057041083643, 0.6501344202803414,
                                    0.44986557971965857, 0.26942958916356996, 0.14456400944391146, 0.1};
  const auto wc = warmup_cosine_schedule(3, 10, 1e-2, 0.1);
  for (size_t t = 0; t < warm.size(); ++t) CHECK(wc->factor(static_cast<int64_t>(t)) == Approx(warm[t]).epsilon(1e-12));
  const std::vector<double> stp = {1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25};
  const auto st = step_schedule(3, 0.5);
  for (size_t t = 0; t < stp.size(); ++t) CHECK(st->factor(static_cast<int64_t>(t)) == stp[t]);
  const std::vector<double> oc = {0.04, 0.52, 1.0, 0.9504846320134737, 0.8117456539497631, 0.6112620219362893,
                                  0.38874197806371075, 0.18825834605023697, 0.049519367986526286, 4e-06};
  const auto one = one_cycle_schedule(10);
  for (size_t t = 0; t < oc.size(); ++t) CHECK(one->factor(static_cast<int64_t>(t)) == Approx(oc[t]).epsilon(1e-12));
  const auto lam = lambda_schedule([](int64_t k) { return std::pow(0.85, static_cast<double>(k / 2)); });
  CHECK(lam->factor(4) == Approx(0.7224999999999999).epsilon(1e-15));
  // The optimizer applies the factor of its step count.
  ToyParams m;
  OptimizerConfig cfg;
  cfg.algorithm = Algorithm::sgd;
  cfg.sgd = {.lr = 0.5};
  cfg.schedule = step_schedule(1, 0.5);
  Optimizer opt(self_mesh(), m, cfg);
  for (int t = 0; t < 3; ++t) {
    const double before = m.s.item();
    const double g = set_grads(m, 500 + t)[3][0];
    opt.step();
    CHECK(std::fabs(m.s.item() - (before - 0.5 * std::pow(0.5, t) * g)) < kExact);
  }
}

TEST_CASE("optimizer bad input: typed errors naming the setting", "[optim][errors]") {
  ToyParams m;
  OptimizerConfig cfg;
  cfg.accumulation_steps = 0;
  CHECK_THROWS_WITH(Optimizer(self_mesh(), m, cfg), Catch::Contains("accumulation_steps"));
  cfg = {};
  cfg.adamw.beta1 = 1.0;
  CHECK_THROWS_AS(Optimizer(self_mesh(), m, cfg), ValueError);
  cfg = {};
  cfg.algorithm = Algorithm::sgd;
  cfg.sgd = {.lr = 0.1, .nesterov = true};
  CHECK_THROWS_WITH(Optimizer(self_mesh(), m, cfg), Catch::Contains("Nesterov"));
  CHECK_THROWS_WITH(parse_sharding_mode("zero2"), Catch::Contains("replicated, ddp, mesh or zero3"));
  CHECK(parse_sharding_mode("zero3") == ShardingMode::zero3);
  CHECK_THROWS_WITH(parse_algorithm("lamb"), Catch::Contains("adamw, sgd or muon_adamw"));
  CHECK_THROWS_AS(one_cycle_schedule(10, 0.05), ValueError);
  CHECK_THROWS_AS(warmup_cosine_schedule(5, 5), ValueError);
  CHECK_THROWS_AS(parse_muon_lr_adjust("spectral"), ValueError);
}

namespace {
// The update formulas as plain scalar loops, one element at a time, in the order optim/adamw.h and optim/sgd.h
// write them: the vector code must give these bits exactly, tails and chunk edges included.
template <class T>
void scalar_adamw(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& m, std::vector<T>& v,
                  const AdamWOptions& o, double lr, int64_t step) {
  const T decay = static_cast<T>(1 - lr * o.weight_decay), b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T step_size = static_cast<T>(lr / (1 - std::pow(o.beta1, static_cast<double>(step))));
  const T sqrt_bc2 = static_cast<T>(std::sqrt(1 - std::pow(o.beta2, static_cast<double>(step))));
  const T eps = static_cast<T>(o.eps);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = p[i] * decay;
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    p[i] = p[i] - step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
  }
}
template <class T>
void scalar_sgd(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& buf, const SGDOptions& o, double lr,
                int64_t step) {
  for (size_t i = 0; i < p.size(); ++i) {
    T d = g[i] + static_cast<T>(o.weight_decay) * p[i];
    if (o.momentum != 0) {
      buf[i] = step == 1 ? d : static_cast<T>(o.momentum) * buf[i] + static_cast<T>(1 - o.dampening) * d;
      d = o.nesterov ? d + static_cast<T>(o.momentum) * buf[i] : buf[i];
    }
    p[i] = p[i] - static_cast<T>(lr) * d;
  }
}
template <class T>
std::vector<T> draw(size_t n, uint64_t seed, double scale) {
  Generator gen(seed);
  const std::vector<double> x = randn({static_cast<int64_t>(n)}, {DType::f64}, &gen).to_vector();
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(scale * x[i]);
  return out;
}
template <class T>
void check_vector_updates_match_scalar() {
  // Sizes around vector widths and the threading chunk (32768), so tails and chunk edges are all exercised.
  for (size_t n : {size_t{1}, size_t{7}, size_t{17}, size_t{64}, size_t{1000}, size_t{32768 + 13}, size_t{70001}}) {
    INFO("n = " << n);
    const AdamWOptions a{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.05};
    std::vector<T> p = draw<T>(n, 1, 1), m = draw<T>(n, 2, 0.1), v = draw<T>(n, 3, 0.1);
    for (T& x : v) x = x * x;
    std::vector<T> p2 = p, m2 = m, v2 = v;
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<T> g = draw<T>(n, 10 + static_cast<uint64_t>(step), 0.5);
      adamw_update<T>(p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(n), a, a.lr, step);
      scalar_adamw<T>(p2, g, m2, v2, a, a.lr, step);
    }
    CHECK(p == p2);
    CHECK(m == m2);
    CHECK(v == v2);
    for (bool nesterov : {false, true}) {
      const SGDOptions s{.lr = 0.05, .momentum = 0.9, .dampening = 0, .weight_decay = 1e-3, .nesterov = nesterov};
      std::vector<T> q = draw<T>(n, 4, 1), b(n, T(0));
      std::vector<T> q2 = q, b2 = b;
      for (int64_t step = 1; step <= 3; ++step) {
        const std::vector<T> g = draw<T>(n, 20 + static_cast<uint64_t>(step), 0.5);
        sgd_update<T>(q.data(), g.data(), b.data(), static_cast<int64_t>(n), s, s.lr, step);
        scalar_sgd<T>(q2, g, b2, s, s.lr, step);
      }
      CHECK(q == q2);
      CHECK(b == b2);
    }
  }
}
}  // namespace

TEST_CASE("AdamW and SGD in vector lanes give the scalar formulas' bits (f32, f64; tails, chunk edges, threads)",
          "[optim][adamw][sgd][simd]") {
  check_vector_updates_match_scalar<float>();
  check_vector_updates_match_scalar<double>();
}
