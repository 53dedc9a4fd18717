#!/usr/bin/env python3
"""Compare ShardRT's Darcy generator in physicsnemo mode with PhysicsNeMo's own datapipe (Darcy2D, Warp on CPU).

Two checks:
  1. Same amplitudes: the Fourier amplitudes ShardRT drew (the `fourier` tensor of its shards) are handed to
     Darcy2D in place of its own random draw, and Darcy2D builds the permeability and solves for the pressure.
     The permeability must match point for point; the pressure is compared by relative L2 and max difference.
     The PhysicsNeMo fields are written as a golden (tests/data_pipeline/golden/) that test_data reads.
  2. Statistics: Darcy2D with its own random draws next to ShardRT's draws (different samples): mean and std of
     both fields.

    tools/golden/check_darcy.py --gen build-cpu/tools/shardrt-darcy-gen --resolution 32 --samples 8 \
        --golden tests/data_pipeline/golden/darcy_physicsnemo_r32.safetensors"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_venv import ensure_golden_venv  # noqa: E402

ensure_golden_venv()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import warp as wp  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from physicsnemo.datapipes.benchmarks.darcy import Darcy2D  # noqa: E402
from physicsnemo.datapipes.benchmarks.kernels.utils import fourier_to_array_batched_2d, threshold_3d  # noqa: E402


class Darcy2DGivenAmplitudes(Darcy2D):
    """Darcy2D whose batch starts from given Fourier amplitudes (4, B, F, F) instead of its own draw; the rest of
    initialize_batch (the Fourier sum, the threshold, zeroed pressure buffers) is its own kernels, unchanged."""

    def __init__(self, amplitudes, **kw):
        super().__init__(**kw)
        self.given = wp.array(amplitudes, dtype=float, device=self.device)

    def initialize_batch(self):
        self.permeability.zero_()
        wp.copy(self.rand_fourier, self.given)
        wp.launch(kernel=fourier_to_array_batched_2d, dim=self.dim,
                  inputs=[self.permeability, self.rand_fourier, self.nr_permeability_freq, self.resolution,
                          self.resolution], device=self.device)
        wp.launch(kernel=threshold_3d, dim=self.dim,
                  inputs=[self.permeability, 0.0, self.min_permeability, self.max_permeability], device=self.device)
        self.darcy0.zero_()
        self.darcy1.zero_()


def first_batch(pipe):
    batch = next(iter(pipe))
    return batch["permeability"][:, 0].clone(), batch["darcy"][:, 0].clone()


def stats(x):
    return {"mean": float(x.double().mean()), "std": float(x.double().std(unbiased=False))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gen", required=True, help="the shardrt-darcy-gen binary")
    ap.add_argument("--resolution", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stat-samples", type=int, default=256, help="samples of each generator for the statistics")
    ap.add_argument("--golden", help="write PhysicsNeMo's fields for the same amplitudes here")
    args = ap.parse_args()
    wp.config.quiet = True
    R, S = args.resolution, args.samples
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.gen, "--out", tmp, "--mode", "physicsnemo", "--resolution", str(R), "--train", str(S),
                        "--val", "0", "--seed", str(args.seed), "--samples-per-shard", str(S)], check=True,
                       stdout=subprocess.DEVNULL)
        ours = load_file(os.path.join(tmp, "darcy_train_000.safetensors"))
    amps = ours["fourier"].permute(1, 0, 2, 3).contiguous().numpy()  # (S, 4, F, F) -> Darcy2D's (4, S, F, F)

    # 1. The same amplitudes, each sample in a batch of its own (Darcy2D's coarse levels read past a sample's
    #    grid into the next one's, so a batch of one keeps samples independent, as ShardRT's are).
    ks, ps = [], []
    for s in range(S):
        pipe = Darcy2DGivenAmplitudes(amps[:, s:s + 1], resolution=R, batch_size=1, device="cpu")
        k, p = first_batch(pipe)
        ks.append(k), ps.append(p)
    k_ref, p_ref = torch.cat(ks), torch.cat(ps)
    k_match = float((k_ref == ours["permeability"]).double().mean())
    diff = (ours["darcy"].double() - p_ref.double())
    rel_l2 = [float(diff[s].norm() / p_ref[s].double().norm()) for s in range(S)]
    result = {
        "resolution": R, "samples": S, "seed": args.seed,
        "same_amplitudes": {"permeability_points_equal": k_match, "pressure_rel_l2_max": max(rel_l2),
                            "pressure_rel_l2_mean": sum(rel_l2) / S, "pressure_max_abs_diff": float(diff.abs().max()),
                            "pressure_max": float(p_ref.max())},
    }
    # 2. Statistics of independent draws: one Darcy2D batch of its own random fields, and as many of ShardRT's.
    N = args.stat_samples
    pipe = Darcy2D(resolution=R, batch_size=N, device="cpu")
    k_own, p_own = first_batch(pipe)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.gen, "--out", tmp, "--mode", "physicsnemo", "--resolution", str(R), "--train", str(N),
                        "--val", "0", "--seed", str(args.seed + 1), "--samples-per-shard", str(N)], check=True,
                       stdout=subprocess.DEVNULL)
        many = load_file(os.path.join(tmp, "darcy_train_000.safetensors"))
    result["statistics"] = {"samples": N,
                            "physicsnemo": {"permeability": stats(k_own), "darcy": stats(p_own)},
                            "shardrt": {"permeability": stats(many["permeability"]), "darcy": stats(many["darcy"])}}
    print(json.dumps(result, indent=2))
    if args.golden:
        os.makedirs(os.path.dirname(os.path.abspath(args.golden)), exist_ok=True)
        save_file({"fourier": ours["fourier"].contiguous(), "permeability": k_ref.contiguous(),
                   "darcy": p_ref.contiguous()}, args.golden,
                  metadata={"source": "physicsnemo.datapipes.benchmarks.darcy.Darcy2D (warp, cpu)",
                            "resolution": str(R), "seed": str(args.seed), "batch_size": "1",
                            "physicsnemo": __import__("physicsnemo").__version__, "warp": wp.__version__})


if __name__ == "__main__":
    main()
