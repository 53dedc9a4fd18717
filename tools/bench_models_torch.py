#!/usr/bin/env python3
"""The PyTorch side of tools/bench-models: one round of one model workload in this (fresh) process, f32 on the CPU.

    tools/bench_models_torch.py --model vit|flare --threads N --mode fwd|fwdbwd --warmup W --iters I
    tools/bench_models_torch.py --model vit|flare --export DIR

Workloads (PhysicsNeMo's own modules; the ViT comes from a checkout of NVIDIA/physicsnemo, --physicsnemo-src or
$SHARDRT_PHYSICSNEMO_SRC, see tools/golden/setup-venv):
  vit    HybridViT(img_size=(128, 128), patch_size=8, in_channels=3, num_classes=10, embed_dim=384, num_heads=6,
         depth=6), x (1, 3, 128, 128)
  flare  FLARE(functional_dim=1, out_dim=1, embedding_dim=2, n_layers=4, n_hidden=128, n_head=8, mlp_ratio=4,
         slice_num=64, structured_shape=(85, 85)), fx (1, 7225, 1), embedding (1, 7225, 2)
fwd: eval() under no_grad. fwdbwd: train() (every dropout is 0, so the same function as eval), parameter grads
cleared, forward, backward of a fixed grad_output; inputs need no grad, as in training.

Weights: torch.manual_seed(0), the module's own init, then tools/golden/perturb.py with a Generator seeded 1 (so
zero biases and pos_embed matter too). Inputs: element i (row-major) of input number `seed` is
offset + scale * sin(0.37 i + seed) in double, cast to f32 (x: seed 1, scale 1; fx: seed 1, scale 1; embedding:
seed 2, scale 0.5, offset 0.5, i.e. positions in [0, 1]); grad_output element i is cos(0.11 i), as in
tools/bench_cpu_torch.py.

Each run prints one JSON line on stdout: the workload, min and median ms over --iters timed steps (after --warmup
untimed ones), peak RSS of the process (MiB; setup_rss_mib is the peak before the first step: interpreter,
torch, model, inputs) and checksums [sum, sum of squares] of the output and, for fwdbwd, of all parameter grads
together. tools/bench-models runs rounds in fresh processes and sets OMP_NUM_THREADS; this script also sets it to
--threads when unset, before torch is imported.

--export DIR writes, for the C++ side to load the same weights and compare against: <model>.weights.safetensors
(f32, state_dict names), <model>.config.json (constructor args), <model>.inputs.safetensors (x, or fx and
embedding), <model>.grad_output.safetensors (key `output`) and <model>.reference.safetensors (`output`,
`grad.<param>` for every parameter, `grad_input.<input>` for every input), from one train-mode forward+backward
with the inputs requiring grad. These are tens of MB: not committed (tests/data/golden/README.md)."""
import argparse
import json
import os
import resource
import statistics
import sys
import time
import warnings

WORKLOADS = {
    "vit": dict(config=dict(img_size=[128, 128], patch_size=8, in_channels=3, num_classes=10, embed_dim=384,
                            num_heads=6, depth=6),
                inputs={"x": dict(shape=(1, 3, 128, 128), seed=1, scale=1.0, offset=0.0)}),
    "flare": dict(config=dict(functional_dim=1, out_dim=1, embedding_dim=2, n_layers=4, n_hidden=128, n_head=8,
                              mlp_ratio=4, slice_num=64, structured_shape=[85, 85]),
                  inputs={"fx": dict(shape=(1, 7225, 1), seed=1, scale=1.0, offset=0.0),
                          "embedding": dict(shape=(1, 7225, 2), seed=2, scale=0.5, offset=0.5)}),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mode", choices=("fwd", "fwdbwd"), default="fwd")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--physicsnemo-src", default=os.environ.get("SHARDRT_PHYSICSNEMO_SRC"),
                   help="root of a checkout of NVIDIA/physicsnemo (ViT only; default $SHARDRT_PHYSICSNEMO_SRC)")
    p.add_argument("--export", metavar="DIR", help="write weights, inputs, grad_output and reference results")
    a = p.parse_args()
    if a.threads < 1 or a.warmup < 0 or a.iters < 1:
        p.error(f"--threads {a.threads} --warmup {a.warmup} --iters {a.iters}: need threads >= 1, warmup >= 0, "
                f"iters >= 1")
    if a.model == "vit" and not a.physicsnemo_src:
        p.error("--model vit needs --physicsnemo-src DIR (or $SHARDRT_PHYSICSNEMO_SRC): HybridViT is PhysicsNeMo's "
                "example, not part of the package; tools/golden/setup-venv --physicsnemo-src DIR clones it")
    return a


ARGS = parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))  # before torch starts its pool
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))
from golden_venv import ensure_golden_venv  # noqa: E402

ensure_golden_venv()
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

import physicsnemo_models  # noqa: E402
from perturb import perturb_parameters  # noqa: E402


def sine_input(shape, seed, scale, offset):
    n = torch.Size(shape).numel()
    i = torch.arange(n, dtype=torch.float64)
    return (offset + scale * torch.sin(0.37 * i + seed)).to(torch.float32).reshape(shape)


def cosine_grad_output(shape):
    return torch.cos(0.11 * torch.arange(torch.Size(shape).numel(), dtype=torch.float64)).float().reshape(shape)


def build(model):
    kwargs = physicsnemo_models.constructor_kwargs(WORKLOADS[model]["config"])
    torch.manual_seed(0)
    if model == "vit":
        net = physicsnemo_models.hybrid_vit_class(ARGS.physicsnemo_src)(**kwargs)
    else:
        net = physicsnemo_models.flare_class()(**kwargs)
    net = net.float()
    perturb_parameters(net, torch.Generator().manual_seed(1))
    return net


def checksum(tensors):
    s = q = 0.0
    for t in tensors:
        t = t.detach().double()
        s += t.sum().item()
        q += (t * t).sum().item()
    return [float(f"{s:.9g}"), float(f"{q:.9g}")]


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def export(net, inputs, folder):
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    name = ARGS.model
    net.train()
    x = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    out = net(**x)
    gout = cosine_grad_output(out.shape)
    out.backward(gout)
    files = {
        f"{name}.weights.safetensors": {k: v.detach().contiguous().clone() for k, v in net.state_dict().items()},
        f"{name}.inputs.safetensors": {k: v.contiguous() for k, v in inputs.items()},
        f"{name}.grad_output.safetensors": {"output": gout.contiguous()},
        f"{name}.reference.safetensors": {"output": out.detach().contiguous(),
                                          **{f"grad.{k}": p.grad.contiguous() for k, p in net.named_parameters()},
                                          **{f"grad_input.{k}": v.grad.contiguous() for k, v in x.items()}},
    }
    for fname, tensors in files.items():
        save_file(tensors, os.path.join(folder, fname))
    with open(os.path.join(folder, f"{name}.config.json"), "w") as f:
        json.dump(WORKLOADS[name]["config"], f, indent=2)
        f.write("\n")
    print(json.dumps({"bench": "bench-models", "impl": "torch", "model": name, "export": os.path.abspath(folder),
                      "files": sorted(files) + [f"{name}.config.json"],
                      "params": sum(p.numel() for p in net.parameters()),
                      "checksum": {"output": checksum([out]),
                                   "grad_params": checksum(p.grad for p in net.parameters())}}))


def main():
    torch.set_num_threads(ARGS.threads)
    net = build(ARGS.model)
    inputs = {k: sine_input(**v) for k, v in WORKLOADS[ARGS.model]["inputs"].items()}
    if ARGS.export:
        export(net, inputs, ARGS.export)
        return
    params = list(net.parameters())
    bwd = ARGS.mode == "fwdbwd"
    net.train(bwd)
    state = {}

    def step():
        if bwd:
            for p in params:
                p.grad = None
            out = net(**inputs)
            if "gout" not in state:
                state["gout"] = cosine_grad_output(out.shape)
            out.backward(state["gout"])
        else:
            with torch.no_grad():
                out = net(**inputs)
        state["out"] = out

    setup_rss = peak_rss_mib()
    for _ in range(ARGS.warmup):
        step()
    ms = []
    for _ in range(ARGS.iters):
        t0 = time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
    sums = {"output": checksum([state["out"]])}
    if bwd:
        sums["grad_params"] = checksum(p.grad for p in params)
    print(json.dumps({"bench": "bench-models", "impl": "torch", "model": ARGS.model, "mode": ARGS.mode,
                      "threads": ARGS.threads, "warmup": ARGS.warmup, "iters": ARGS.iters,
                      "params": sum(p.numel() for p in params),
                      "min_ms": round(min(ms), 4), "median_ms": round(statistics.median(ms), 4),
                      "setup_rss_mib": round(setup_rss, 1), "peak_rss_mib": round(peak_rss_mib(), 1),
                      "checksum": sums}))


if __name__ == "__main__":
    main()
