// Learning-rate schedules as PyTorch's lr_scheduler classes compute them (their closed forms): each gives the
// multiplier of the base learning rate for optimizer step `t` = the number of steps already taken (0 for the first
// step, as a scheduler stepped once after every optimizer.step()).
//   constant                 1
//   warmup_cosine            LinearLR(start_factor, total_iters = warmup) then CosineAnnealingLR(T_max = total -
//                            warmup, eta_min = min_factor * base): the Darcy FLARE recipe (start 1e-2, to 0.1 * lr)
//   step                     gamma ^ floor(t / step_size)                     (StepLR)
//   one_cycle                OneCycleLR(max_lr = base, total_steps, pct_start, div_factor, final_div_factor), cosine
//                            annealing, two phases
//   lambda                   any function of t                                 (LambdaLR, e.g. 0.85 ^ (t / 8))
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace shardrt::optim {

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual double factor(int64_t t) const = 0;
  virtual std::string describe() const = 0;
};

std::shared_ptr<Schedule> constant_schedule();
std::shared_ptr<Schedule> warmup_cosine_schedule(int64_t warmup_steps, int64_t total_steps, double start_factor = 1e-2,
                                                 double min_factor = 0.0);
std::shared_ptr<Schedule> step_schedule(int64_t step_size, double gamma = 0.1);
std::shared_ptr<Schedule> one_cycle_schedule(int64_t total_steps, double pct_start = 0.3, double div_factor = 25.0,
                                             double final_div_factor = 1e4);
std::shared_ptr<Schedule> lambda_schedule(std::function<double(int64_t)> factor, std::string name = "lambda");

}  // namespace shardrt::optim
