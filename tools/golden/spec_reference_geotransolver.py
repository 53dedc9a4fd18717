"""GeoTransolver written again from models-spec.md §2.3 and §4.4 in plain tensor algebra, like spec_reference.py
for ViT and FLARE: the 3x3 convs as nine shifted matrix products, explicit softmax attention, LayerNorm by hand,
the ball query as a brute-force sort of all distances. check_goldens.py runs it on a golden's param.* and input.*
(the recorded Gumbel noise included) and compares output and every grad with the golden."""
import math

import torch

from spec_reference import attention, gelu, layer_norm, linear, silu


def conv3x3(x, P, prefix, shape):
    """x (B, N, C) on a row-major grid `shape` (2-D or 3-D) -> (B, N, O): a 3^d-tap, stride-1, zero-padded conv,
    summed tap by tap (tap offset t - 1 along each axis)."""
    w, bias = P[f"{prefix}.weight"], P[f"{prefix}.bias"]  # (O, C, 3, 3[, 3])
    b, n, c = x.shape
    d = len(shape)
    grid = x.reshape(b, *shape, c)
    padded = torch.nn.functional.pad(grid, [0, 0] + [1, 1] * d)  # pads the last dims first: C untouched
    out = 0
    for tap in torch.cartesian_prod(*[torch.arange(3)] * d).reshape(-1, d).tolist():
        window = padded[(slice(None),) + tuple(slice(t, t + s) for t, s in zip(tap, shape))]
        out = out + window.reshape(b, n, c) @ w[(slice(None), slice(None)) + tuple(tap)].T
    return out + bias


def project(x, P, prefix, shape):
    return conv3x3(x, P, prefix, shape) if shape else linear(x, P, prefix)


def slice_tokens(z, f, P, prefix, plus, noise):
    """§2.3: slice weights w (B, N, H, S) and tokens T (B, H, S, D) from logits z and features f."""
    if plus:
        tau = P[f"{prefix}.temperature"] + gelu(linear(gelu(linear(f, P, f"{prefix}.proj_temperature.0")), P,
                                                        f"{prefix}.proj_temperature.2"))
        tau = torch.clamp(tau, min=0.01)
        g = -torch.log(-torch.log(noise + 1e-8) + 1e-8)
        w = torch.softmax((z + g) / tau, -1)
    else:
        w = torch.softmax(z / torch.clamp(P[f"{prefix}.temperature"], 0.5, 5.0), -1)
    nu = w.sum(1) + 0.01  # (B, H, S), the 0.01 once on the global sum
    return w, torch.einsum("bnhs,bnhd->bhsd", w / nu[:, None], f)


def context_projector(x, P, prefix, h, dc, plus, shape, noise):
    b, m, _ = x.shape
    xm = project(x, P, f"{prefix}.in_project_x", shape).reshape(b, m, h, dc)
    fm = xm if plus else project(x, P, f"{prefix}.in_project_fx", shape).reshape(b, m, h, dc)
    z = linear(xm, P, f"{prefix}.in_project_slice")
    return slice_tokens(z, fm, P, prefix, plus, noise.get(f"gumbel_u.{prefix}"))[1]


def ball_query(points, queries, radius, k):
    """(B, Q, k, 3): per query the coordinates of the (at most) k nearest points within `radius` (inclusive), in
    ascending distance, zeros in the unused slots; differentiable in `points` only."""
    d = ((queries.detach()[:, :, None, :] - points.detach()[:, None, :, :]) ** 2).sum(-1).sqrt()  # (B, Q, P)
    dist, idx = d.sort(-1)
    dist, idx = dist[..., :k], idx[..., :k]
    gathered = torch.gather(points[:, None].expand(-1, queries.shape[1], -1, -1), 2,
                            idx[..., None].expand(-1, -1, -1, 3))
    return gathered * (dist <= radius)[..., None]


def processor(points, queries, P, prefix, radius, k):
    nb = ball_query(points, queries, radius, k).flatten(2)  # neighbour outer, xyz inner
    h = gelu(linear(nb, P, f"{prefix}.mlp.layers.0"))
    h = gelu(linear(h, P, f"{prefix}.mlp.layers.2"))
    return torch.tanh(linear(h, P, f"{prefix}.mlp.layers.4"))


def gale(a, ctx, P, prefix, h, d, shape, plus, mode, noise):
    b, n, _ = a.shape
    xm = project(a, P, f"{prefix}.in_project_x", shape).reshape(b, n, h, d)
    fm = xm if plus else project(a, P, f"{prefix}.in_project_fx", shape).reshape(b, n, h, d)
    w, t = slice_tokens(linear(xm, P, f"{prefix}.in_project_slice"), fm, P, prefix, plus, noise)
    qkv = t @ P[f"{prefix}.qkv_project.weight"].T  # (B, H, S, 3D), q | k | v along the channels
    m = attention(qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:], 1 / math.sqrt(d))
    if ctx is not None:
        ca = attention(linear(t, P, f"{prefix}.cross_q"), linear(ctx, P, f"{prefix}.cross_k"),
                       linear(ctx, P, f"{prefix}.cross_v"), 1 / math.sqrt(d))
        m = mix(m, ca, P, prefix, mode)
    y = torch.einsum("bnhs,bhsd->bnhd", w, m).reshape(b, n, h * d)  # raw w, not w / nu
    return linear(y, P, f"{prefix}.out_linear")


def gale_fa(a, ctx, P, prefix, h, d, mode):
    b, n, _ = a.shape
    xm = linear(a, P, f"{prefix}.in_project_x").reshape(b, n, h, d).permute(0, 2, 1, 3)  # (B, H, N, D)
    k, v = linear(xm, P, f"{prefix}.self_k"), linear(xm, P, f"{prefix}.self_v")
    q = P[f"{prefix}.q_global"]
    y = attention(k, q, attention(q, k, v, 1.0), 1.0)  # FLARE's two passes, scale 1
    if ctx is not None:
        ca = attention(linear(xm, P, f"{prefix}.cross_q"), linear(ctx, P, f"{prefix}.cross_k"),
                       linear(ctx, P, f"{prefix}.cross_v"), 1.0)  # per-token queries, scale 1
        y = mix(y, ca, P, prefix, mode)
    return linear(y.permute(0, 2, 1, 3).reshape(b, n, h * d), P, f"{prefix}.out_linear")


def mix(sa, ca, P, prefix, mode):
    if mode == "weighted":
        g = torch.sigmoid(P[f"{prefix}.state_mixing"])
        return g * sa + (1 - g) * ca
    return gelu(linear(torch.cat([sa, ca], -1), P, f"{prefix}.concat_project.0"))


def geotransolver(P, inputs, c):
    """inputs: model input names (`local_embedding[.i]`, `local_positions[.i]`, `geometry`, `global_embedding`,
    `gumbel_u.*`) -> the outputs by name (`output` or `output.i`)."""
    multi = isinstance(c["functional_dim"], list)
    n_streams = len(c["functional_dim"]) if multi else 1
    stream = (lambda base, i: inputs.get(f"{base}.{i}")) if multi else (lambda base, i: inputs.get(base))
    noise = {k: v for k, v in inputs.items() if k.startswith("gumbel_u.")}
    act = {"gelu": gelu, "silu": silu}[c.get("act", "gelu")]  # preprocess and block MLPs; the rest is fixed GELU
    n, h, plus = c.get("n_hidden", 256), c.get("n_head", 8), c.get("plus", False)
    mode, shape = c.get("state_mixing_mode", "weighted"), c.get("structured_shape")
    dc = n // h
    le = [stream("local_embedding", i) for i in range(n_streams)]
    spatial = le[0].shape[1:-1] if le[0].dim() > 3 else None
    le = [x.reshape(x.shape[0], -1, x.shape[-1]) for x in le]
    geometry = inputs.get("geometry")
    if geometry is not None:
        geometry = geometry.reshape(geometry.shape[0], -1, geometry.shape[-1])

    parts, local = [], []
    if c.get("include_local_features"):
        radii, ks = c.get("radii", [0.05, 0.25]), c.get("neighbors_in_radius", [8, 32])
        for i in range(n_streams):
            pos = stream("local_positions", i)
            feats = []
            for j, (r, k) in enumerate(zip(radii, ks)):
                pre = f"context_builder.local_extractors.{i}"
                on_geometry = processor(pos, geometry, P, f"{pre}.processors.{j}", r, k)
                parts.append(context_projector(on_geometry, P, f"{pre}.tokenizers.{j}", h, dc, plus, None, noise))
                feats.append(processor(geometry, pos, P, f"{pre}.processors.{j}", r, k))  # the swapped direction
            local.append(torch.cat(feats, -1))
    if geometry is not None:
        parts.append(context_projector(geometry, P, "context_builder.geometry_tokenizer", h, dc, plus, shape, noise))
    if "global_embedding" in inputs:
        parts.append(context_projector(inputs["global_embedding"], P, "context_builder.global_tokenizer", h, dc,
                                       plus, None, noise))
    ctx = torch.cat(parts, -1) if parts else None

    xs = []
    for i, x in enumerate(le):
        x = linear(act(linear(x, P, f"preprocess.{i}.layers.0")), P, f"preprocess.{i}.layers.2")
        xs.append(torch.cat([x, local[i]], -1) if local else x)
    cc = xs[0].shape[-1]
    d = cc // h
    fa = c.get("attention_type", "GALE") == "GALE_FA"
    for layer in range(c.get("n_layers", 4)):
        s = f"blocks.{layer}"
        for i in range(n_streams):
            a = layer_norm(xs[i], P[f"{s}.ln_1.weight"], P[f"{s}.ln_1.bias"])
            if fa:
                o = gale_fa(a, ctx, P, f"{s}.Attn", h, d, mode)
            else:
                o = gale(a, ctx, P, f"{s}.Attn", h, d, shape, plus, mode, noise.get(f"gumbel_u.{s}.Attn.{i}"))
            x = xs[i] + o
            m = layer_norm(x, P[f"{s}.ln_mlp1.0.weight"], P[f"{s}.ln_mlp1.0.bias"])
            xs[i] = x + linear(act(linear(m, P, f"{s}.ln_mlp1.1.layers.0")), P, f"{s}.ln_mlp1.1.layers.2")
    out = {}
    for i, x in enumerate(xs):
        y = linear(layer_norm(x, P[f"ln_mlp_out.{i}.0.weight"], P[f"ln_mlp_out.{i}.0.bias"]), P, f"ln_mlp_out.{i}.1")
        out[f"output.{i}" if multi else "output"] = y.reshape(y.shape[0], *spatial, -1) if spatial else y
    return out
