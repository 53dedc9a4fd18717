"""The perturbation applied to every parameter before a golden or a benchmark export is made.

A freshly built model hides mistakes: pos_embed and every Transolver bias start at zero, LayerNorm weights at one,
and FLARE's small init (weights of std 0.02) leaves its attention logits near zero, so the softmaxes are almost
uniform and the grads of q_global and self_k almost vanish. Every parameter therefore moves by seeded Gaussian
noise:
  Linear / Conv weight  w <- w + randn / sqrt(fan_in)   (unit gain: activations and attention logits of order 1)
  LayerNorm weight      w <- w + 0.2 randn              (about 1 +- 0.2)
  LayerNorm bias        b <- b + 0.1 randn
  slice temperature     tau_h <- tau_h +- 0.2 |randn|   (Transolver family, [1, 1, H, 1]: raised on even heads,
                                                        lowered on odd ones)
  everything else       p <- p + 0.1 randn              (biases, pos_embed, FLARE's q_global)
The temperature starts at 0.5, the lower bound of its clamp to [0.5, 5]: symmetric noise would leave all heads of a
module below the bound (a zero grad) often enough, and all above it just as often (the clamp's mask untested). Odd
heads below and even heads above exercise both sides in every module. (Plus mode clamps only at 0.01.)
Buffers (FLARE's unified-position grid and time frequencies) are functions of the config and stay as they are."""
import math

import torch

LAYER_NORM_WEIGHT_SIGMA = 0.2
LAYER_NORM_BIAS_SIGMA = 0.1
OTHER_SIGMA = 0.1
TEMPERATURE_SIGMA = 0.2


def sigmas(net):
    """id(parameter) -> the standard deviation of its noise, for every parameter the rule above names by layer."""
    out = {}
    for _, module in net.named_modules():
        if isinstance(module, torch.nn.LayerNorm):
            out[id(module.weight)] = LAYER_NORM_WEIGHT_SIGMA
            out[id(module.bias)] = LAYER_NORM_BIAS_SIGMA
        elif isinstance(module, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
            w = module.weight
            out[id(w)] = 1.0 / math.sqrt(w.numel() // w.shape[0])
    return out


def perturb_parameters(net, gen):
    """Perturb every parameter of `net` in place, in named_parameters order, drawing from `gen`; raise if any
    element is left at its initial value."""
    sigma = sigmas(net)
    with torch.no_grad():
        for name, p in net.named_parameters():
            before = p.detach().clone()
            noise = torch.randn(p.shape, dtype=torch.float64, generator=gen)
            if name.split(".")[-1] == "temperature":
                sign = torch.ones(p.shape[2], dtype=torch.float64)
                sign[1::2] = -1.0
                delta = TEMPERATURE_SIGMA * noise.abs() * sign.view(1, 1, -1, 1)
            else:
                delta = sigma.get(id(p), OTHER_SIGMA) * noise
            p.add_(delta.to(p.dtype))
            if (p == before).any():
                raise SystemExit(f"perturb_parameters: {name} kept an element at its initial value")
