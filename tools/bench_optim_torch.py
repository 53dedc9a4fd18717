"""PyTorch's AdamW (foreach) step on the parameter set shardrt-bench-optim --shapes FILE wrote, on the CPU: the
reference side of the optimizer-step table in docs/benchmarks.md. Run with the golden venv's python:

    /work/venv-golden/bin/python tools/bench_optim_torch.py FILE [--threads N] [--iters I]
"""
import argparse
import json
import math
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shapes = json.load(open(args.shapes))
    params = [torch.nn.Parameter(torch.zeros(s["shape"])) for s in shapes]
    for p in params:
        n = p.numel()
        p.grad = (1e-3 * torch.sin(0.37 * torch.arange(n, dtype=torch.float64))).float().reshape(p.shape)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, foreach=True)
    times = []
    for i in range(args.iters + 1):
        t0 = time.perf_counter()
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    times.sort()
    count = sum(p.numel() for p in params)
    print(f"torch AdamW foreach: {count} parameters, {args.threads} thread(s), step {1e3 * times[len(times) // 2]:.2f} ms")


if __name__ == "__main__":
    main()
