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


def share_text(used: float, capacity: float) -> str:
    """Memory used as a share of capacity, as every line prints it: rounded down below 100 % (a
    plan at 96.6 % reads "96%", never "97%"), so that the table and the text agree and a plan
    that fits never reads "100%"."""
    import math

    share = used / capacity
    return f"{math.floor(share * 100)}%" if share < 1 else f"{share:.0%}"


def token_text(n: float) -> str:
    """A token count as people write it: 15T, 300B, 1.5M, 4K (10¹², 10⁹, 10⁶, 10³)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:,.4g}{unit}"
    return f"{n:,.0f}"
