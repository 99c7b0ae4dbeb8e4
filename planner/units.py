"""Unit conversions, done once at the edges. Inside, everything is bytes, seconds and FLOPs.

GiB = 2³⁰ bytes (memory capacities, as nvidia-smi and PyTorch report them);
GB = 10⁹ bytes (bandwidths and the ZeRO paper's tables, as vendors quote them).
"""

GIB = 2**30
GB = 10**9
TB = 10**12
TFLOPS = 10**12
US = 1e-6
GBIT = 10**9 / 8  # bytes per second in one Gb/s
