#!/usr/bin/env python3
"""The PyTorch side of tools/bench-models: one round of one model workload in this (fresh) process, f32 on the CPU.

    tools/bench_models_torch.py --model M --threads N --mode fwd|fwdbwd --warmup W --iters I
    tools/bench_models_torch.py --model M --export DIR

Workloads (PhysicsNeMo's own modules; the ViT comes from a checkout of NVIDIA/physicsnemo, --physicsnemo-src or
$SHARDRT_PHYSICSNEMO_SRC, see tools/golden/setup-venv):
  vit    HybridViT(img_size=(128, 128), patch_size=8, in_channels=3, num_classes=10, embed_dim=384, num_heads=6,
         depth=6), x (1, 3, 128, 128)
  flare  FLARE(functional_dim=1, out_dim=1, embedding_dim=2, n_layers=4, n_hidden=128, n_head=8, mlp_ratio=4,
         slice_num=64, structured_shape=(85, 85)), fx (1, 7225, 1), embedding (1, 7225, 2)
  geo_gale   GeoTransolver Darcy (examples/cfd/darcy_transolver/model/geotransolver.yaml, models-spec §5):
         functional_dim=3, out_dim=1, geometry_dim=3, n_layers=4, n_hidden=128, n_head=4, mlp_ratio=4,
         slice_num=64, structured_shape=(85, 85), GALE, weighted; local_embedding = geometry = (x, y, k) on the grid
  geo_fa     the same with attention_type="GALE_FA", state_mixing_mode="concat_project" (geotransolver_fa.yaml)
  geo_local  unstructured with local features: functional_dim=3, out_dim=4, geometry_dim=3, n_layers=2,
         n_hidden=64, n_head=4, mlp_ratio=2, slice_num=32, radii [0.05, 0.25], K [8, 32], n_hidden_local=32
         (C_eff 128); local_embedding (1, 100000, 3), local_positions (1, 100000, 3), geometry (1, 20000, 3)
GeoTransolver inputs: the Darcy grid is x = i/84 (row), y = j/84 (column), k = sin(0.37 n + 1) at point n = 85 i + j;
geo_local's are drawn from a torch.Generator seeded 7 (randn features, positions uniform in the unit cube: a sine
formula would put every point on one curve). The C++ side reads them from the export. PhysicsNeMo's ball query runs
its default backend (Warp on the CPU when installed, as here: the K first found in hash-grid order, so ShardRT's
nearest-K in distance order is a different, equally valid neighbour list and geo_local's checksums are not
comparable); every step reports the time spent inside radius_search (radius_search_ms).
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
    "geo_gale": dict(model="geotransolver", inputs="darcy",
                     config=dict(functional_dim=3, out_dim=1, geometry_dim=3, n_layers=4, n_hidden=128, n_head=4,
                                 mlp_ratio=4, slice_num=64, structured_shape=[85, 85])),
    "geo_fa": dict(model="geotransolver", inputs="darcy",
                   config=dict(functional_dim=3, out_dim=1, geometry_dim=3, n_layers=4, n_hidden=128, n_head=4,
                               mlp_ratio=4, slice_num=64, structured_shape=[85, 85], attention_type="GALE_FA",
                               state_mixing_mode="concat_project")),
    "geo_local": dict(model="geotransolver", inputs="cloud",
                      config=dict(functional_dim=3, out_dim=4, geometry_dim=3, n_layers=2, n_hidden=64, n_head=4,
                                  mlp_ratio=2, slice_num=32, include_local_features=True, radii=[0.05, 0.25],
                                  neighbors_in_radius=[8, 32], n_hidden_local=32)),
}
# models-spec §5 states the Darcy counts; checked before a run.
STATED_PARAMS = {"geo_gale": 1852633, "geo_fa": 766789}
CLOUD_POINTS, CLOUD_GEOMETRY = 100000, 20000


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

import geotransolver_cases  # noqa: E402
import physicsnemo_models  # noqa: E402
from perturb import perturb_parameters  # noqa: E402


def sine_input(shape, seed, scale, offset):
    n = torch.Size(shape).numel()
    i = torch.arange(n, dtype=torch.float64)
    return (offset + scale * torch.sin(0.37 * i + seed)).to(torch.float32).reshape(shape)


def cosine_grad_output(shape):
    return torch.cos(0.11 * torch.arange(torch.Size(shape).numel(), dtype=torch.float64)).float().reshape(shape)


def make_inputs(name):
    w = WORKLOADS[name]
    if w.get("inputs") == "darcy":
        h, wd = w["config"]["structured_shape"]
        i, j = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(wd, dtype=torch.float64),
                              indexing="ij")
        n = torch.arange(h * wd, dtype=torch.float64).reshape(h, wd)
        grid = torch.stack([i / (h - 1), j / (wd - 1), torch.sin(0.37 * n + 1)], -1).reshape(1, h * wd, 3).float()
        return {"local_embedding": grid, "geometry": grid.clone()}
    if w.get("inputs") == "cloud":
        gen = torch.Generator().manual_seed(7)
        return {"local_embedding": torch.randn(1, CLOUD_POINTS, 3, generator=gen),
                "local_positions": torch.rand(1, CLOUD_POINTS, 3, generator=gen),
                "geometry": torch.rand(1, CLOUD_GEOMETRY, 3, generator=gen)}
    return {k: sine_input(**v) for k, v in w["inputs"].items()}


def build(name):
    w = WORKLOADS[name]
    kwargs = physicsnemo_models.constructor_kwargs(w["config"])
    torch.manual_seed(0)
    if name == "vit":
        net = physicsnemo_models.hybrid_vit_class(ARGS.physicsnemo_src)(**kwargs)
    elif w.get("model") == "geotransolver":
        net = physicsnemo_models.geotransolver_class()(**kwargs)
        n_params = sum(p.numel() for p in net.parameters())
        want = geotransolver_cases.expected_counts(w["config"])[0]
        if n_params != want or n_params != STATED_PARAMS.get(name, n_params):
            raise SystemExit(f"{name}: {n_params} parameters; models-spec.md's formulas give {want}"
                             + (f", §5 states {STATED_PARAMS[name]}" if name in STATED_PARAMS else ""))
    else:
        net = physicsnemo_models.flare_class()(**kwargs)
    net = net.float()
    perturb_parameters(net, torch.Generator().manual_seed(1))
    return net


class SearchTimer:
    """Wall time spent inside PhysicsNeMo's radius_search (BQWarp's call), summed until reset."""

    def __init__(self):
        from physicsnemo.nn.module import ball_query
        self.ms, inner = 0.0, ball_query.radius_search

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.ms += (time.perf_counter() - t0) * 1e3
        ball_query.radius_search = timed


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
    if name == "geo_local":
        SearchTimer()  # the same dispatch as the timed runs
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
    inputs = make_inputs(ARGS.model)
    if ARGS.export:
        export(net, inputs, ARGS.export)
        return
    timer = SearchTimer() if WORKLOADS[ARGS.model]["config"].get("include_local_features") else None
    search_ms = []
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
    ms, cpu = [], []
    for _ in range(ARGS.iters):
        if timer:
            timer.ms = 0.0
        c0, t0 = time.process_time(), time.perf_counter()
        step()
        ms.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        if timer:
            search_ms.append(timer.ms)
    sums = {"output": checksum([state["out"]])}
    if bwd:
        sums["grad_params"] = checksum(p.grad for p in params)
    row = {"bench": "bench-models", "impl": "torch", "model": ARGS.model, "mode": ARGS.mode,
           "threads": ARGS.threads, "warmup": ARGS.warmup, "iters": ARGS.iters,
           "params": sum(p.numel() for p in params),
           "min_ms": round(min(ms), 4), "median_ms": round(statistics.median(ms), 4),
           "cpu_min_ms": round(min(cpu), 4), "cpu_median_ms": round(statistics.median(cpu), 4),
           "setup_rss_mib": round(setup_rss, 1), "peak_rss_mib": round(peak_rss_mib(), 1),
           "checksum": sums}
    if timer:
        row["radius_search_ms"] = round(statistics.median(search_ms), 4)
        row["neighbour_order"] = "physicsnemo default backend"
    print(json.dumps(row))


if __name__ == "__main__":
    main()
