"""The perturbation applied to every parameter before a golden or a benchmark export is made.

A freshly built model hides mistakes: pos_embed and every Transolver bias start at zero, LayerNorm weights at one,
so a C++ model that forgot a bias or a norm's scale would still match. Every parameter therefore moves by seeded
Gaussian noise, LayerNorms more than the rest so their affine part clearly matters:
  LayerNorm weight  w <- w + 0.2 randn   (about 1 +- 0.2)
  LayerNorm bias    b <- b + 0.1 randn
  everything else   p <- p + 0.05 randn  (Linear/Conv weights and biases, pos_embed, FLARE's q_global)
Buffers (FLARE's unified-position grid and time frequencies) are functions of the config and stay as they are."""
import torch

LAYER_NORM_WEIGHT_SIGMA = 0.2
LAYER_NORM_BIAS_SIGMA = 0.1
OTHER_SIGMA = 0.05


def perturb_parameters(net, gen):
    """Perturb every parameter of `net` in place, in named_parameters order, drawing from `gen`; raise if any
    element is left at its initial value."""
    norm_params = {}
    for _, module in net.named_modules():
        if isinstance(module, torch.nn.LayerNorm):
            norm_params[id(module.weight)] = LAYER_NORM_WEIGHT_SIGMA
            norm_params[id(module.bias)] = LAYER_NORM_BIAS_SIGMA
    with torch.no_grad():
        for name, p in net.named_parameters():
            before = p.detach().clone()
            noise = torch.randn(p.shape, dtype=torch.float64, generator=gen)
            p.add_((norm_params.get(id(p), OTHER_SIGMA) * noise).to(p.dtype))
            if (p == before).any():
                raise SystemExit(f"perturb_parameters: {name} kept an element at its initial value")
