# Sourced by the shell tests that train (train_cli.sh, ../reliability/faults_train_save.sh): the one tiny Darcy
# problem they share, so a change to the model or the optimizer under test is made in one place.
#   tiny_darcy GEN DIR <<JSON   generates DIR/data (12 x 12, exact solver, 8 training and 4 validation samples) and
#                               writes DIR/tiny.json: FLARE of two 16-wide layers in fp64, AdamW with warmup-cosine,
#                               relative L2, logging every step without plots; its standard input holds the JSON
#                               members each test sets itself (data, mesh, steps, checkpoint, validation).
tiny_darcy() {
  local gen=$1 dir=$2 members
  members=$(cat)
  "$gen" --out "$dir/data" --mode exact --resolution 12 --train 8 --val 4 --seed 3 >/dev/null
  cat > "$dir/tiny.json" <<JSON
{
  "model": {"kind": "flare", "seed": 5,
            "args": {"functional_dim": 1, "out_dim": 1, "n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 2,
                     "slice_num": 4, "unified_pos": true, "ref": 4, "structured_shape": [12, 12]}},
  "precision": "f64",
  "optimizer": {"algorithm": "adamw", "lr": 3e-3, "weight_decay": 1e-4, "max_grad_norm": 1.0},
  "schedule": {"kind": "warmup_cosine", "warmup_steps": 1, "start_factor": 0.1, "min_factor": 0.1},
  "loss": {"kind": "relative_l2"},
  "log": {"every": 1, "plots": false, "progress_bar": "off"},
$members
}
JSON
}
