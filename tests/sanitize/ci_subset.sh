# `tools/test --sanitize=ci`: the part of the sanitized suite a CI run can afford (docs/reliability.md §Sanitizers
# has the times). The ASan library itself is most of the cost; on top of it, the C API's parity and bad-input tables
# (every public entry point, models, a training step, checkpoints), the runtime readers (safetensors, .pt, .mdlus)
# and the C in-situ example, which trains and infers through the C API on 1 and 2 ranks.
sanitize_ci_targets=(libshardrt tests/test_capi tests/test_runtime examples/heat_insitu)
sanitize_ci_tests='^(capi_np1|capi_np2|runtime_np1|heat_insitu_np1|heat_insitu_np2)$'
