"""ViT and FLARE written again from models-spec.md (§1.5, §2.2, §3.4) in plain tensor algebra: explicit patch
extraction instead of a conv, explicit softmax attention instead of SDPA, LayerNorm from its mean and biased
variance. check_goldens.py runs it on a golden's own param.* and input.* tensors and compares output and every
grad (through autograd of this code) with the golden: a match says the spec the C++ models follow reproduces
PhysicsNeMo's modules on these cases, so a C++ mismatch is in the C++ and not in the spec."""
import math

import torch

LN_EPS = 1e-5


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased, as nn.LayerNorm
    return (x - mu) / torch.sqrt(var + LN_EPS) * w + b


def linear(x, P, prefix, bias=True):
    y = x @ P[f"{prefix}.weight"].T
    return y + P[f"{prefix}.bias"] if bias else y


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))  # exact (erf) GELU


def silu(x):
    return x * torch.sigmoid(x)


def attention(q, k, v, scale):
    s = scale * (q @ k.transpose(-1, -2))
    p = torch.exp(s - s.max(-1, keepdim=True).values)
    return (p / p.sum(-1, keepdim=True)) @ v


def vit(P, x, c):
    e, p, heads = c["embed_dim"], c["patch_size"], c["num_heads"]
    b, cin, *spatial = x.shape
    d = len(spatial)
    # Patches, flattened in the conv weight's (c, k1, k2[, k3]) order; tokens row-major over the patch grid.
    grid = [s // p for s in spatial]
    shape = [b, cin] + [v for g in grid for v in (g, p)]
    perm = [0] + [2 + 2 * i for i in range(d)] + [1] + [3 + 2 * i for i in range(d)]
    n = math.prod(grid)
    patches = x.reshape(shape).permute(perm).reshape(b, n, cin * p ** d)
    h = patches @ P["patch_embed.conv.weight"].reshape(e, -1).T + P["patch_embed.conv.bias"]
    h = torch.relu(layer_norm(h, P["patch_embed.norm.weight"], P["patch_embed.norm.bias"]))
    h = h + P["pos_embed"]
    hd = e // heads
    for i in range(c["depth"]):
        s = f"stages.{i}"
        a = layer_norm(h, P[f"{s}.norm1.weight"], P[f"{s}.norm1.bias"])
        qkv = linear(a, P, f"{s}.attn.qkv", bias=c.get("qkv_bias", True))
        qkv = qkv.reshape(b, n, 3, heads, hd).permute(2, 0, 3, 1, 4)
        o = attention(qkv[0], qkv[1], qkv[2], 1 / math.sqrt(hd)).transpose(1, 2).reshape(b, n, e)
        h = h + linear(o, P, f"{s}.attn.proj")
        m = layer_norm(h, P[f"{s}.norm2.weight"], P[f"{s}.norm2.bias"])
        h = h + linear(gelu(linear(m, P, f"{s}.mlp.fc1")), P, f"{s}.mlp.fc2")
    feat = h.mean(1)
    return linear(feat, P, "head") if c["num_classes"] > 0 else feat


def flare(P, inputs, c):
    act = {"gelu": gelu, "silu": silu}[c.get("act", "gelu")]
    fx = inputs["fx"]
    spatial = fx.shape[1:-1] if fx.dim() != 3 else None
    b = fx.shape[0]
    fx = fx.reshape(b, -1, fx.shape[-1])
    if c.get("unified_pos"):
        emb = P["embedding"].expand(b, -1, -1)
    else:
        emb = inputs["embedding"].reshape(b, fx.shape[1], -1)
    h = torch.cat([emb, fx], -1)  # the embedding's columns come first
    h = linear(act(linear(h, P, "preprocess.layers.0")), P, "preprocess.layers.2")
    if "time" in inputs:
        a = inputs["time"][:, None] * P["time_embed.freqs"][None, :]
        t = torch.cat([torch.cos(a), torch.sin(a)], -1)
        h = h + linear(silu(linear(t, P, "time_fc.0")), P, "time_fc.2")[:, None, :]
    heads = c.get("n_head", 8)
    dh = c.get("n_hidden", 256) // heads
    n = h.shape[1]
    for i in range(c.get("n_layers", 4)):
        s = f"blocks.{i}"
        a = layer_norm(h, P[f"{s}.ln_1.weight"], P[f"{s}.ln_1.bias"])
        xm = linear(a, P, f"{s}.Attn.in_project_x").reshape(b, n, heads, dh).permute(0, 2, 1, 3)
        k = linear(xm, P, f"{s}.Attn.self_k")  # one D x D weight shared by every head
        v = linear(xm, P, f"{s}.Attn.self_v")
        g = P[f"{s}.Attn.q_global"]
        z = attention(g, k, v, 1.0)  # encode: latents attend over the N tokens
        y = attention(k, g, z, 1.0)  # decode: tokens (as queries K) attend over the latents
        h = h + linear(y.permute(0, 2, 1, 3).reshape(b, n, heads * dh), P, f"{s}.Attn.out_linear")
        m = layer_norm(h, P[f"{s}.ln_mlp1.0.weight"], P[f"{s}.ln_mlp1.0.bias"])
        h = h + linear(act(linear(m, P, f"{s}.ln_mlp1.1.layers.0")), P, f"{s}.ln_mlp1.1.layers.2")
        if i == c.get("n_layers", 4) - 1:
            h = linear(layer_norm(h, P[f"{s}.ln_mlp2.0.weight"], P[f"{s}.ln_mlp2.0.bias"]), P, f"{s}.ln_mlp2.1")
    return h.reshape(b, *spatial, -1) if spatial is not None else h
