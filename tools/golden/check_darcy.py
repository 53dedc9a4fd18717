#!/usr/bin/env python3
"""Compare ShardRT's Darcy generator in physicsnemo mode with PhysicsNeMo's own datapipe (Darcy2D, Warp on CPU).

Two checks:
  1. Same amplitudes: the Fourier amplitudes ShardRT drew (independent draws; the `fourier` tensor of its shards)
     are handed to Darcy2D in place of its own random draw, and Darcy2D builds the permeability and solves for the
     pressure. The permeability must match point for point; the pressure is compared by relative L2 and max
     difference. The PhysicsNeMo fields are written as a golden (tests/data_pipeline/golden/) that test_data reads,
     unless Darcy2D produced a non-finite value (its coarse levels read past the grid, see darcy_physicsnemo.h).
  2. Darcy2D's own draw: whether the samples of one batch are the same field and every frequency pair shares its
     basis' amplitude, and the distribution of the high-permeability fraction over many of its draws next to
     ShardRT's with --amplitudes darcy2d and independent (permeability only: no solve needed).

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
                        "--val", "0", "--seed", str(args.seed), "--samples-per-shard", str(S),
                        "--amplitudes", "independent"], check=True, stdout=subprocess.DEVNULL)
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
    finite = [bool(torch.isfinite(p_ref[s]).all()) for s in range(S)]
    k_match = float((k_ref == ours["permeability"]).double().mean())
    diff = (ours["darcy"].double() - p_ref.double())
    rel_l2 = [float(diff[s].norm() / p_ref[s].double().norm()) for s in range(S) if finite[s]]
    result = {
        "resolution": R, "samples": S, "seed": args.seed,
        "same_amplitudes": {"permeability_points_equal": k_match, "physicsnemo_nonfinite_samples": finite.count(False),
                            "pressure_rel_l2_max": max(rel_l2), "pressure_rel_l2_mean": sum(rel_l2) / len(rel_l2),
                            "pressure_max_abs_diff": max(float(diff[s].abs().max()) for s in range(S) if finite[s]),
                            "pressure_max": float(p_ref[torch.tensor(finite)].max())},
    }
    # 2. Darcy2D's own draw.
    N = args.stat_samples
    pipe = Darcy2D(resolution=R, batch_size=3, device="cpu")
    pipe.initialize_batch()
    a = pipe.rand_fourier.numpy()
    k3 = pipe.permeability.numpy()
    result["darcy2d_draw"] = {
        "batch_samples_identical": bool(np.array_equal(k3[0], k3[1]) and np.array_equal(k3[1], k3[2])),
        "amplitudes_shared_over_frequencies": bool(all(np.all(a[q] == a[q, 0, 0, 0]) for q in range(4))),
    }
    pipe = Darcy2D(resolution=R, batch_size=1, device="cpu")
    fractions = []
    for _ in range(N):
        pipe.initialize_batch()
        fractions.append(float((pipe.permeability.numpy()[0, :R, :R] > 1.0).mean()))

    def summary(f):
        f = np.asarray(f)
        return {"mean": float(f.mean()), "std": float(f.std()), "p10": float(np.quantile(f, 0.1)),
                "p90": float(np.quantile(f, 0.9))}

    result["high_permeability_fraction"] = {"draws": N, "physicsnemo": summary(fractions)}
    for draw in ("darcy2d", "independent"):
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([args.gen, "--out", tmp, "--mode", "exact", "--resolution", str(R), "--train", str(N),
                            "--val", "0", "--seed", str(args.seed + 1), "--samples-per-shard", str(N),
                            "--amplitudes", draw, "--tolerance", "1e-4"], check=True, stdout=subprocess.DEVNULL)
            many = load_file(os.path.join(tmp, "darcy_train_000.safetensors"))
        result["high_permeability_fraction"]["shardrt_" + draw] = summary(
            (many["permeability"] > 1.0).double().mean(dim=(1, 2)).tolist())
    print(json.dumps(result, indent=2))
    if args.golden and not all(finite):
        print("not writing the golden: Darcy2D produced non-finite pressures; run again", file=sys.stderr)
        sys.exit(1)
    if args.golden:
        os.makedirs(os.path.dirname(os.path.abspath(args.golden)), exist_ok=True)
        save_file({"fourier": ours["fourier"].contiguous(), "permeability": k_ref.contiguous(),
                   "darcy": p_ref.contiguous()}, args.golden,
                  metadata={"source": "physicsnemo.datapipes.benchmarks.darcy.Darcy2D (warp, cpu)",
                            "resolution": str(R), "seed": str(args.seed), "batch_size": "1",
                            "physicsnemo": __import__("physicsnemo").__version__, "warp": wp.__version__})


if __name__ == "__main__":
    main()
