#!/usr/bin/env python3
"""The same Darcy training recipe as shardrt-train, in PyTorch with PhysicsNeMo's own FLARE: the side-by-side of
docs/training.md (issue 28). Not run by CI; needs the golden venv (tools/golden/setup-venv).

    /work/venv-golden/bin/python tools/darcy_torch_train.py --config RUN/config.json [--threads 2] [--csv FILE]

RUN/config.json is the merged document shardrt-train writes into its log.out_dir, so both sides read one recipe:
model.args, optimizer (AdamW or Muon + AdamW: lr, muon_lr, betas, eps, weight_decay, max_grad_norm), schedule (warmup_cosine / one_cycle /
constant, closed forms as optim/schedule.h), loss.kind and loss.units, data (train / val manifests, batch_size,
normalize, shuffle), steps, validation.every / samples.

What is the same: the data files, the scalar mean/std normaliser of the training split (population std over every
point), the model's constructor arguments, the loss, the optimizer and its settings, the schedule and the
validation metric (per-sample relative L2 of the pressure in physical units, averaged). What is not: the
initial weights (PyTorch's own initialisation from torch.manual_seed(model.seed)) and the order of the samples
(a torch.randperm per epoch instead of ShardRT's Philox permutation), so the two runs see the same distribution,
not the same numbers; the comparison is of where they end, not step for step."""
import argparse
import csv
import json
import math
import os
import sys
import time

import numpy as np
import torch
from safetensors.numpy import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden"))
from physicsnemo_models import constructor_kwargs, flare_class  # noqa: E402


def load_split(manifest_path):
    m = json.load(open(manifest_path))
    root = os.path.dirname(os.path.abspath(manifest_path))
    ks, ps = [], []
    for shard in m["shards"]:
        f = load_file(os.path.join(root, shard["file"]))
        ks.append(f["permeability"]), ps.append(f["darcy"])
    return np.concatenate(ks).astype(np.float64), np.concatenate(ps).astype(np.float64)


def schedule_factor(s, total):
    kind = s.get("kind", "constant")
    if kind == "constant":
        return lambda t: 1.0
    if kind == "warmup_cosine":
        w, start, lo = s.get("warmup_steps", 1), s.get("start_factor", 1e-2), s.get("min_factor", 0.0)

        def f(t):
            if t < w:
                return start + (1 - start) * t / w
            k = min(t - w, total - w)
            return lo + (1 - lo) * (1 + math.cos(math.pi * k / (total - w))) / 2
        return f
    if kind == "one_cycle":
        pct, div, fdiv = s.get("pct_start", 0.3), s.get("div_factor", 25.0), s.get("final_div_factor", 1e4)
        initial, lo = 1 / div, 1 / div / fdiv
        end1, end2 = pct * total - 1, total - 1

        def anneal(a, b, p):
            return b + (a - b) / 2 * (math.cos(math.pi * p) + 1)
        return lambda t: anneal(initial, 1.0, t / end1) if t <= end1 else anneal(1.0, lo, (t - end1) / (end2 - end1))
    raise SystemExit(f"darcy_torch_train: schedule.kind '{kind}' is not mirrored here")


def relative_l2(pred, target):  # per sample, averaged over the batch (PhysicsNeMo's LpLoss)
    b = pred.shape[0]
    return (torch.linalg.norm((pred - target).reshape(b, -1), dim=1) / torch.linalg.norm(target.reshape(b, -1), dim=1)).mean()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the merged config.json shardrt-train wrote")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--csv", help="write step,loss,lr,val_rel_l2 rows here")
    ap.add_argument("--dtype", choices=["f32", "f64"], help="default: the config's precision")
    a = ap.parse_args()
    c = json.load(open(a.config))
    torch.set_num_threads(a.threads)
    dtype = torch.float64 if (a.dtype or c.get("precision", "f32")) == "f64" else torch.float32
    model_cfg = c["model"]
    if model_cfg.get("kind", "flare") != "flare":
        raise SystemExit("darcy_torch_train: only model.kind flare is mirrored")
    torch.manual_seed(model_cfg.get("seed", 0))
    model = flare_class()(**constructor_kwargs(model_cfg["args"])).to(dtype)

    data = c["data"]
    K, P = load_split(data["train"])
    Kv, Pv = load_split(data["val"])
    if c.get("validation", {}).get("samples", 0) > 0:
        Kv, Pv = Kv[:c["validation"]["samples"]], Pv[:c["validation"]["samples"]]
    norm = data.get("normalize", True)
    km, ks = (K.mean(), K.std()) if norm else (0.0, 1.0)
    pm, ps = (P.mean(), P.std()) if norm else (0.0, 1.0)
    to_t = lambda x: torch.tensor(x, dtype=dtype)
    Kn, Pn = to_t((K - km) / ks)[..., None], to_t((P - pm) / ps)[..., None]
    Kvn, Pv_t = to_t((Kv - km) / ks)[..., None], to_t(Pv)[..., None]

    o = c["optimizer"]
    algorithm = o.get("algorithm", "adamw")
    if algorithm not in ("adamw", "muon_adamw"):
        raise SystemExit(f"darcy_torch_train: optimizer.algorithm '{algorithm}' is not mirrored (adamw, muon_adamw)")
    params = list(model.parameters())
    # muon_adamw as ShardRT's (optim/muon.h): torch.optim.Muon on the 2-D weights (lr muon_lr, its own defaults:
    # weight decay 0.1, momentum 0.95, Nesterov, the "original" lr adjustment), AdamW on everything else.
    matrices = [p for p in params if p.ndim == 2] if algorithm == "muon_adamw" else []
    rest = [p for p in params if not any(p is m for m in matrices)]
    opts = [torch.optim.AdamW(rest, lr=o.get("lr", 1e-3), betas=tuple(o.get("betas", [0.9, 0.999])),
                              eps=o.get("eps", 1e-8), weight_decay=o.get("weight_decay", 1e-4))]
    if matrices:
        opts.append(torch.optim.Muon(matrices, lr=o.get("muon_lr", 0.02), adjust_lr_fn="original"))
    total = c["steps"]
    factor = schedule_factor(c.get("schedule", {}), total)
    scheds = [torch.optim.lr_scheduler.LambdaLR(x, factor) for x in opts]
    loss_cfg = c.get("loss", {})
    physical = loss_cfg.get("units", "physical") == "physical"
    batch = data.get("batch_size", 1)
    val_every = c.get("validation", {}).get("every", 0)
    log_every = c.get("log", {}).get("every", 10)

    def loss_fn(pred, target):
        if physical:  # the relative L2 of the pressure itself: undo the normaliser on both sides
            pred, target = pred * ps + pm, target * ps + pm
        kind = loss_cfg.get("kind", "relative_l2")
        if kind == "relative_l2":
            return relative_l2(pred, target)
        if kind == "mse":
            return torch.nn.functional.mse_loss(pred, target)
        raise SystemExit(f"darcy_torch_train: loss.kind '{kind}' is not mirrored")

    def validate():
        model.eval()
        with torch.no_grad():
            errs = []
            for i in range(0, len(Kvn), 16):
                pred = model(Kvn[i:i + 16]) * ps + pm
                t = Pv_t[i:i + 16]
                errs.append(torch.linalg.norm((pred - t).reshape(len(t), -1), dim=1) /
                            torch.linalg.norm(t.reshape(len(t), -1), dim=1))
        model.train()
        return torch.cat(errs).mean().item()

    rows = []
    perm, pos = torch.randperm(len(Kn)), 0
    start = time.time()
    print(f"darcy_torch_train: flare ({sum(p.numel() for p in model.parameters())} parameters, {dtype}); "
          f"{len(Kn)} train samples; batch {batch}; {total} steps; torch {torch.__version__}, {a.threads} thread(s)")
    for step in range(1, total + 1):
        if pos + batch > len(Kn):
            perm, pos = torch.randperm(len(Kn)), 0
        idx = perm[pos:pos + batch]
        pos += batch
        lr = opts[0].param_groups[0]["lr"]
        loss = loss_fn(model(Kn[idx]), Pn[idx])
        for x in opts:
            x.zero_grad(set_to_none=True)
        loss.backward()
        if o.get("max_grad_norm", 0) > 0:
            torch.nn.utils.clip_grad_norm_(params, o["max_grad_norm"])
        for x in opts:
            x.step()
        for x in scheds:
            x.step()
        val = validate() if (val_every and step % val_every == 0) or step == total else None
        if step % log_every == 0 or val is not None:
            rows.append((step, loss.item(), lr, val))
            el = time.time() - start
            print(f"step {step:6d}/{total}  loss {loss.item():.6f}  lr {lr:.3g}  {el / step:.4f} s/step" +
                  (f"  val rel L2 (darcy) {val:.4f}" if val is not None else ""), flush=True)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "loss", "lr", "val_rel_l2"])
            for r in rows:
                w.writerow(["" if v is None else v for v in r])
    print(f"validation relative L2 (darcy, {len(Kvn)} samples): {rows[-1][3]:.4f}; {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
