"""The GeoTransolver golden cases (issue 12) and what makes them reproducible outside PyTorch.

Three things differ from the ViT/FLARE cases:
- Inputs may be streams (`local_embedding.0`, `local_embedding.1` become the tuple `local_embedding`), positions
  are drawn in the unit cube (a ball query needs a density, not randn's tails), and the structured case passes the
  same grid tensor twice (local_embedding and geometry: equal values, two leaves, so each gets its own grad).
- Local features run a ball query. PhysicsNeMo dispatches it to Warp when Warp is installed (it is in the golden
  venv); Warp casts to float32 and returns neighbours in hash-grid order. The goldens use PhysicsNeMo's own torch
  backend instead (`implementation="torch"`: the K nearest within r in ascending distance, fp64), the order
  ShardRT's radius_search uses; `ball_query_margins` checks the draw leaves no distance near a radius and no near
  tie, so any correct search returns the same neighbours in the same order.
- `plus=True` draws Gumbel noise u ~ U[0,1) with torch.rand_like in every slice aggregation, in eval too. The
  golden records every u (gumbel_noise.py) and stores it as an extra input, `gumbel_u.<site>`."""
import contextlib
import functools

import torch

GEO_MODEL = "geotransolver"
FIXED = dict(n_layers=2, dropout=0.0, act="gelu", use_te=False)

# name -> (shape, how it is drawn): "randn", "unit" (uniform in [0,1)), or ("same", other input)
CASES = {
    # GALE, weighted mixing, geometry with N_geo != N, two global tokens; 72 state_dict entries like §4.8.
    "geotransolver_gale_weighted": dict(
        model=GEO_MODEL, seed=301,
        inputs={"local_embedding": ((2, 37, 3), "randn"), "geometry": ((2, 29, 3), "randn"),
                "global_embedding": ((2, 2, 4), "randn")},
        config=dict(functional_dim=3, out_dim=2, geometry_dim=3, global_dim=4, n_hidden=32, n_head=4,
                    mlp_ratio=1, slice_num=8, attention_type="GALE", state_mixing_mode="weighted", **FIXED)),
    # GALE_FA (FLARE self-attention), concat_project mixing, geometry only.
    "geotransolver_galefa_concat": dict(
        model=GEO_MODEL, seed=302,
        inputs={"local_embedding": ((2, 33, 2), "randn"), "geometry": ((2, 19, 3), "randn")},
        config=dict(functional_dim=2, out_dim=1, geometry_dim=3, n_hidden=16, n_head=2, mlp_ratio=2,
                    slice_num=4, attention_type="GALE_FA", state_mixing_mode="concat_project", **FIXED)),
    # Structured 7x5 grid (uneven rows on 2, 3, 4 ranks): Conv2d GALE and the conv geometry tokenizer; geometry is
    # the same grid tensor as local_embedding (as the Darcy example passes it), both spatial.
    "geotransolver_structured2d": dict(
        model=GEO_MODEL, seed=303,
        inputs={"local_embedding": ((2, 7, 5, 3), "randn"), "geometry": ((2, 7, 5, 3), ("same", "local_embedding"))},
        config=dict(functional_dim=3, out_dim=1, geometry_dim=3, n_hidden=16, n_head=2, mlp_ratio=1, slice_num=4,
                    structured_shape=[7, 5], attention_type="GALE", state_mixing_mode="weighted", **FIXED)),
    # Local features, two radii: n_hidden 18 over 3 heads (Dc 6), h_loc 8, so C_eff = 34 and D = 11, H*D = 33 < 34
    # (quirk 3 of §4.7). Radii and K chosen so that, in both search directions, some queries have fewer than K
    # neighbours (zero-filled slots) and some more (truncated to the K nearest); checked while writing.
    "geotransolver_local": dict(
        model=GEO_MODEL, seed=304,
        inputs={"local_embedding": ((2, 40, 4), "randn"), "local_positions": ((2, 40, 3), "unit"),
                "geometry": ((2, 31, 3), "unit")},
        config=dict(functional_dim=4, out_dim=2, geometry_dim=3, n_hidden=18, n_head=3, mlp_ratio=1, slice_num=4,
                    include_local_features=True, radii=[0.3, 0.55], neighbors_in_radius=[4, 10], n_hidden_local=8,
                    attention_type="GALE", state_mixing_mode="weighted", **FIXED)),
    # Two streams of different lengths, a global embedding, Transolver++ slice weighting (Gumbel noise recorded).
    "geotransolver_two_streams": dict(
        model=GEO_MODEL, seed=305,
        inputs={"local_embedding.0": ((2, 23, 3), "randn"), "local_embedding.1": ((2, 31, 2), "randn"),
                "global_embedding": ((2, 3, 5), "randn")},
        config=dict(functional_dim=[3, 2], out_dim=[2, 3], global_dim=5, n_hidden=16, n_head=2, mlp_ratio=1,
                    slice_num=4, plus=True, attention_type="GALE", state_mixing_mode="weighted", **FIXED)),
}


# ---- models-spec.md §4.8 / §4.9: parameter and state_dict entry counts ------------------------------------------

def _projector(cg, h, dc, s, plus, taps):
    """ContextProjector / StructuredContextProjector on Cg channels (taps = 3^d for the conv one, else 1)."""
    proj = cg * h * dc * taps + h * dc
    params = h + proj + (0 if plus else proj) + (dc * s + s) + ((dc * s + s) + (s + 1) if plus else 0)
    keys = 1 + 2 + (0 if plus else 2) + 2 + (4 if plus else 0)
    return params, keys


def _attention(c, h, d, s, dctx, mode, plus, attention_type, taps):
    mix = (1, 1) if mode == "weighted" else (2 * d * d + d, 2)
    if attention_type == "GALE_FA":  # point-wise blocks even on a structured grid; no plus variant
        params = h * s * d + (c * h * d + h * d) + 2 * (d * d + d) + (h * d * c + c)
        keys = 1 + 2 + 4 + 2
        if dctx > 0:
            params += mix[0] + (d * d + d) + 2 * (dctx * d + d)
            keys += mix[1] + 6
        return params, keys
    proj = c * h * d * taps + h * d
    params = (h + mix[0] + (d * s + s) + 3 * d * d + (h * d * c + c) + proj + (0 if plus else proj)
              + (d * d + d) + 2 * (dctx * d + d) + ((d * s + s) + (s + 1) if plus else 0))
    keys = 1 + mix[1] + 2 + 1 + 2 + 2 + (0 if plus else 2) + 6 + (4 if plus else 0)
    return params, keys  # cross_* and the mixing are registered even when dctx == 0 (§4.7 quirk 1)


def expected_counts(c):
    """Parameter count and state_dict entry count of a GeoTransolver config, from §4.9's formulas extended to plus
    (in_project_fx gone, proj_temperature added), structured (3^d-tap convs) and several streams."""
    fdims = c["functional_dim"] if isinstance(c["functional_dim"], list) else [c["functional_dim"]]
    odims = c["out_dim"] if isinstance(c["out_dim"], list) else [c["out_dim"]]
    n, h, s, r = c.get("n_hidden", 256), c.get("n_head", 8), c.get("slice_num", 32), c.get("mlp_ratio", 4)
    plus, mode = c.get("plus", False), c.get("state_mixing_mode", "weighted")
    shape = c.get("structured_shape")
    taps = 3 ** len(shape) if shape else 1
    geo, glob = c.get("geometry_dim"), c.get("global_dim")
    local = bool(c.get("include_local_features")) and geo is not None and shape is None
    radii, ks, hl = c.get("radii", [0.05, 0.25]), c.get("neighbors_in_radius", [8, 32]), c.get("n_hidden_local", 32)
    dc = n // h
    params = keys = 0
    dctx = 0
    if local:
        for _ in fdims:
            for k in ks:
                params += (3 * k * hl + hl) + (hl * (hl // 2) + hl // 2) + ((hl // 2) * hl + hl)
                p, q = _projector(hl, h, dc, s, plus, 1)
                params, keys = params + p, keys + 6 + q
        dctx += dc * len(radii) * len(fdims)
    if geo is not None:
        p, q = _projector(geo, h, dc, s, plus, taps)
        params, keys, dctx = params + p, keys + q, dctx + dc
    if glob is not None:
        p, q = _projector(glob, h, dc, s, plus, 1)
        params, keys, dctx = params + p, keys + q, dctx + dc
    cc = n + hl * len(radii) if local else n
    d = cc // h
    for f in fdims:
        params, keys = params + f * 2 * n + 2 * n + 2 * n * n + n, keys + 4
    p, q = _attention(cc, h, d, s, dctx, mode, plus, c.get("attention_type", "GALE"), taps)
    block = p + 2 * cc + 2 * cc + (cc * r * cc + r * cc) + (r * cc * cc + cc)
    params, keys = params + c.get("n_layers", 4) * block, keys + c.get("n_layers", 4) * (q + 8)
    for o in odims:
        params, keys = params + 2 * cc + cc * o + o, keys + 4
    if c.get("time_input"):
        params, keys = params + 2 * (n * n + n), keys + 4
    return params, keys


# The numbers models-spec.md states outright (§4.6, §4.8, §5), each checked against the formulas above before any
# case is made, so the formulas are the spec's and not fitted to the module.
_TEST_MODEL = dict(functional_dim=3, out_dim=2, geometry_dim=3, global_dim=8, n_layers=2, n_hidden=32, n_head=4,
                   mlp_ratio=1, slice_num=8)
_DARCY = dict(functional_dim=3, out_dim=1, geometry_dim=3, n_layers=4, n_hidden=128, n_head=4, mlp_ratio=4,
              slice_num=64, structured_shape=[85, 85])
_AERO = dict(geometry_dim=3, n_layers=12, n_hidden=256, n_head=8, mlp_ratio=4, slice_num=256)
SPEC_STATED = [
    ("§4.6/§4.8 GALE", dict(_TEST_MODEL), (15492, 72)),
    ("§4.6/§4.8 GALE_FA", dict(_TEST_MODEL, attention_type="GALE_FA"), (13644, 70)),
    ("§4.6 structured GALE", dict(_TEST_MODEL, structured_shape=[128, 128]), (49796, None)),
    ("§4.6/§4.8 plus", dict(_TEST_MODEL, plus=True), (13288, 80)),
    ("§5 darcy geotransolver", dict(_DARCY), (1852633, None)),
    ("§5 darcy geotransolver_fa", dict(_DARCY, attention_type="GALE_FA", state_mixing_mode="concat_project"),
     (766789, None)),
    ("§5 aero geotransolver_surface", dict(_AERO, functional_dim=6, out_dim=4, global_dim=3), (9046016, None)),
    ("§5 aero geotransolver_volume", dict(_AERO, functional_dim=7, out_dim=5, global_dim=3,
                                          include_local_features=True, radii=[0.01, 0.05, 0.25, 1.0, 2.5, 5.0],
                                          neighbors_in_radius=[8, 16, 32, 32, 64, 128], n_hidden_local=32),
     (27574449, None)),
    ("§5 transformer_models geotransolver", dict(functional_dim=6, out_dim=4, global_dim=2, geometry_dim=3,
                                                 n_layers=20, n_hidden=256, n_head=8, mlp_ratio=2, slice_num=128,
                                                 include_local_features=True, radii=[0.05, 0.25, 1.0, 2.5],
                                                 neighbors_in_radius=[8, 32, 64, 128], n_hidden_local=32),
     (21662568, None)),
]


def check_spec_stated():
    for what, config, (params, keys) in SPEC_STATED:
        got = expected_counts(config)
        if got[0] != params or (keys is not None and got[1] != keys):
            raise SystemExit(f"GeoTransolver count formulas give {got} for {what}; models-spec.md states "
                             f"{params} parameters" + (f" and {keys} keys" if keys is not None else ""))


# ---- inputs ------------------------------------------------------------------------------------------------------

def make_inputs(inputs, gen):
    """Every input, drawn in table order from `gen`, with requires_grad (every GeoTransolver input gets a grad)."""
    out = {}
    for name, (shape, how) in inputs.items():
        if isinstance(how, tuple) and how[0] == "same":
            out[name] = out[how[1]].detach().clone().requires_grad_(True)
        elif how == "unit":
            out[name] = torch.rand(shape, dtype=torch.float64, generator=gen).requires_grad_(True)
        else:
            out[name] = torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_(True)
    return out


def forward_kwargs(inputs):
    """Model input names -> forward kwargs: `local_embedding.i` (and `local_positions.i`) become tuples in stream
    order; a bare name passes as it is."""
    kwargs, streams = {}, {}
    for name, t in inputs.items():
        base, _, idx = name.partition(".")
        if idx:
            streams.setdefault(base, {})[int(idx)] = t
        else:
            kwargs[name] = t
    for base, by_idx in streams.items():
        kwargs[base] = tuple(by_idx[i] for i in range(len(by_idx)))
    return kwargs


def output_tensors(out):
    """The forward result as {name: tensor}: `output`, or `output.0`, `output.1` for streams."""
    if isinstance(out, torch.Tensor):
        return {"output": out}
    return {f"output.{i}": t for i, t in enumerate(out)}


# ---- the ball query --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def torch_radius_search():
    """Route BQWarp's radius_search to PhysicsNeMo's torch backend (fp64, K nearest in ascending distance) for the
    duration, whatever backends are installed."""
    from physicsnemo.nn.module import ball_query
    from physicsnemo.nn.functional import radius_search
    saved = ball_query.radius_search
    ball_query.radius_search = functools.partial(radius_search, implementation="torch")
    try:
        yield
    finally:
        ball_query.radius_search = saved


RADIUS_MARGIN = 1e-6  # no distance this close to a radius: a search computing distances another way agrees
TIE_MARGIN = 1e-9  # no two of a query's K+1 nearest this close: the order of the K kept is unambiguous


def ball_query_margins(case, config, inputs):
    """For both search directions of every scale (context features: points = local_positions, queries = geometry;
    local features: the reverse), check the margins above, that every cloud has at least K points (PhysicsNeMo's
    torch backend pads with point 0 otherwise, not zeros), and that some queries keep fewer than K neighbours and
    some had more than K within r. Returns a one-line summary."""
    if not config.get("include_local_features"):
        return ""
    kw = forward_kwargs({k: v.detach() for k, v in inputs.items()})
    positions = kw["local_positions"] if isinstance(kw["local_positions"], tuple) else (kw["local_positions"],)
    geometry = kw["geometry"]
    notes = []
    for si, pos in enumerate(positions):
        for r, k in zip(config["radii"], config["neighbors_in_radius"]):
            for what, points, queries in (("context", pos, geometry), ("local", geometry, pos)):
                if points.shape[1] < k:
                    raise SystemExit(f"{case}: {points.shape[1]} points for K = {k} ({what} features)")
                dist = torch.cdist(queries, points)  # (B, Q, P)
                if ((dist - r).abs() < RADIUS_MARGIN).any():
                    raise SystemExit(f"{case}: a distance within {RADIUS_MARGIN:g} of radius {r}")
                near = dist.sort(-1).values[..., : k + 1]
                if (near.diff(dim=-1) < TIE_MARGIN).any():
                    raise SystemExit(f"{case}: a near tie among the {k + 1} nearest ({what} features)")
                within = (dist <= r).sum(-1)
                fewer, more = (within < k).sum().item(), (within > k).sum().item()
                if fewer == 0 or more == 0:
                    raise SystemExit(f"{case}: r {r}, K {k} ({what} features): {fewer} queries with fewer than K "
                                     f"neighbours, {more} with more; need both")
                notes.append(f"stream {si} r {r} K {k} {what}: {fewer} short, {more} truncated of "
                             f"{within.numel()}")
    return "; ".join(notes)
