"""Fit the A100 profile's GEMM efficiency to the per-layer micro-benchmark of Korthikanti et al.
2022 Table 4, and print the fit. Run: python benchmarks/calibrate_a100.py

This is the only fitted number of the A100 profile; the end-to-end published runs
(`plan3d validate`) are then a test of the model, not a fit."""

from planner.catalog import load_hardware
from planner.model.validation import calibrate_layer_gemm

fit = calibrate_layer_gemm(load_hardware("a100-nvlink"))
print(f"GEMM efficiency η = {fit.efficiency:.3f} of dense peak (A100 fp16/bf16, 312 TFLOP/s)")
print(f"{'Table 4 row':48s} {'fwd meas':>9s} {'fwd model':>9s} {'bwd meas':>9s} {'bwd model':>9s}")
for case_id, fm, fp, bm, bp in fit.rows:
    print(f"{case_id:48s} {fm:9.2f} {fp:9.2f} {bm:9.2f} {bp:9.2f}")
