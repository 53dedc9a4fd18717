#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "runtime/errors.h"

namespace shardrt::optim {

namespace {

class Constant final : public Schedule {
 public:
  double factor(int64_t) const override { return 1.0; }
  std::string describe() const override { return "constant"; }
};

class WarmupCosine final : public Schedule {
 public:
  WarmupCosine(int64_t warmup, int64_t total, double start, double min)
      : warmup_(warmup), total_(total), start_(start), min_(min) {}
  double factor(int64_t t) const override {
    if (t < warmup_) return start_ + (1 - start_) * static_cast<double>(t) / static_cast<double>(warmup_);
    const int64_t span = total_ - warmup_;
    const double k = static_cast<double>(std::min(t - warmup_, span));
    return min_ + (1 - min_) * (1 + std::cos(std::numbers::pi * k / static_cast<double>(span))) / 2;
  }
  std::string describe() const override {
    return "warmup_cosine(warmup " + std::to_string(warmup_) + ", total " + std::to_string(total_) + ")";
  }

 private:
  int64_t warmup_, total_;
  double start_, min_;
};

class StepDecay final : public Schedule {
 public:
  StepDecay(int64_t size, double gamma) : size_(size), gamma_(gamma) {}
  double factor(int64_t t) const override { return std::pow(gamma_, static_cast<double>(t / size_)); }
  std::string describe() const override { return "step(" + std::to_string(size_) + ")"; }

 private:
  int64_t size_;
  double gamma_;
};

class OneCycle final : public Schedule {
 public:
  OneCycle(int64_t total, double pct, double div, double final_div)
      : total_(total), pct_(pct), initial_(1 / div), min_(1 / div / final_div) {}
  double factor(int64_t t) const override {
    // torch's phase ends: step pct * total - 1 reaches max_lr, step total - 1 reaches min_lr.
    const double end1 = pct_ * static_cast<double>(total_) - 1, end2 = static_cast<double>(total_) - 1;
    const double s = static_cast<double>(t);
    auto anneal = [](double from, double to, double pct) { return to + (from - to) / 2 * (std::cos(std::numbers::pi * pct) + 1); };
    if (s <= end1) return anneal(initial_, 1.0, s / end1);
    return anneal(1.0, min_, (s - end1) / (end2 - end1));
  }
  std::string describe() const override { return "one_cycle(" + std::to_string(total_) + ")"; }

 private:
  int64_t total_;
  double pct_, initial_, min_;
};

class Lambda final : public Schedule {
 public:
  Lambda(std::function<double(int64_t)> f, std::string name) : f_(std::move(f)), name_(std::move(name)) {}
  double factor(int64_t t) const override { return f_(t); }
  std::string describe() const override { return name_; }

 private:
  std::function<double(int64_t)> f_;
  std::string name_;
};

}  // namespace

std::shared_ptr<Schedule> constant_schedule() { return std::make_shared<Constant>(); }

std::shared_ptr<Schedule> warmup_cosine_schedule(int64_t warmup, int64_t total, double start, double min) {
  SHARDRT_CHECK(warmup >= 1 && total > warmup, ValueError, "warmup_cosine_schedule: warmup ", warmup, " and total ",
                total, " steps: need 1 <= warmup < total");
  SHARDRT_CHECK(start > 0 && start <= 1 && min >= 0 && min <= 1, ValueError, "warmup_cosine_schedule: start_factor ",
                start, " must lie in (0, 1], min_factor ", min, " in [0, 1]");
  return std::make_shared<WarmupCosine>(warmup, total, start, min);
}

std::shared_ptr<Schedule> step_schedule(int64_t step_size, double gamma) {
  SHARDRT_CHECK(step_size >= 1, ValueError, "step_schedule: step_size ", step_size, " must be >= 1");
  return std::make_shared<StepDecay>(step_size, gamma);
}

std::shared_ptr<Schedule> one_cycle_schedule(int64_t total, double pct, double div, double final_div) {
  SHARDRT_CHECK(total >= 2 && pct > 0 && pct < 1 && pct * static_cast<double>(total) > 1, ValueError,
                "one_cycle_schedule: total_steps ", total, " and pct_start ", pct,
                ": need pct_start in (0, 1) and pct_start * total_steps > 1");
  SHARDRT_CHECK(div > 0 && final_div > 0, ValueError, "one_cycle_schedule: div_factor ", div, " and final_div_factor ",
                final_div, " must be > 0");
  return std::make_shared<OneCycle>(total, pct, div, final_div);
}

std::shared_ptr<Schedule> lambda_schedule(std::function<double(int64_t)> factor, std::string name) {
  SHARDRT_CHECK(static_cast<bool>(factor), ValueError, "lambda_schedule: an empty function");
  return std::make_shared<Lambda>(std::move(factor), std::move(name));
}

}  // namespace shardrt::optim
