"""fa4_prof.py - FlashAttention-4 under ncu, on the shape of our harnesses' prof modes (128K tokens:
B = 131072 / S, bf16), for a side-by-side with our kernels on one machine with the same ncu
sections.

    python3 fa4_prof.py S k [bwd|fwd] [d]
S: sequence length; k: 0 full, 1 causal; the pass (default bwd: the shape of `bwd_bench prof S k`;
fwd: the shape of `fwd_bench prof S full|causal d`); d: head dim (default 128), with H = 4096 / d
heads (32 at d = 128) as the harnesses' prof modes.

Only the last call runs inside the profiler's window, so run it as
    ncu --profile-from-start off [sections] -o fa4 python3 share/bench/bwd/fa4_prof.py 8192 0
to capture every kernel of one backward (FA4's preprocess, main kernel and postprocess), or of
one forward with `fwd`, and nothing of the JIT compilation or the warm-up. Needs flash-attn-4
(flash_attn.cute).
"""
import sys

import torch
from flash_attn.cute import flash_attn_func


def main():
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    causal = len(sys.argv) > 2 and sys.argv[2] == "1"
    bwd = not (len(sys.argv) > 3 and sys.argv[3] == "fwd")
    D = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    B, H = max(1, 131072 // S), 4096 // D
    q, k, v, do = [(torch.rand(B, S, H, D, device="cuda", dtype=torch.bfloat16) * 2 - 1).requires_grad_(bwd and i < 3)
                   for i in range(4)]
    calls = 2 if bwd else 3  # the last one is profiled: its backward, or itself
    for it in range(calls):
        last = it == calls - 1
        if last and not bwd:
            torch.cuda.profiler.start()
        o = flash_attn_func(q, k, v, softmax_scale=D ** -0.5, causal=causal)
        o = o[0] if isinstance(o, (tuple, list)) else o
        torch.cuda.synchronize()
        if bwd:
            if last:
                torch.cuda.profiler.start()
            torch.autograd.grad(o, (q, k, v), do)
            torch.cuda.synchronize()
        if last:
            torch.cuda.profiler.stop()
    print("fa4_prof: one", "backward" if bwd else "forward", "profiled,", S, "causal" if causal else "full", "d =", D)


if __name__ == "__main__":
    main()
