"""fa4_prof.py - FlashAttention-4's backward under ncu, on the shape of `bwd_bench prof S k`
(128K tokens: B = 131072 / S, H = 32, d = 128, bf16; k = 0 full, 1 causal), for a side-by-side
with our kernel on one machine with the same ncu sections.

Only the second backward runs inside the profiler's window, so run it as
    ncu --profile-from-start off [sections] -o fa4 python3 share/bench/bwd/fa4_prof.py 8192 0
to capture every kernel of one backward (FA4's preprocess, main kernel and postprocess) and
nothing of the JIT compilation or the forward. Needs flash-attn-4 (flash_attn.cute).
"""
import sys

import torch
from flash_attn.cute import flash_attn_func


def main():
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    causal = len(sys.argv) > 2 and sys.argv[2] == "1"
    B, H, D = max(1, 131072 // S), 32, 128
    q, k, v, do = [(torch.rand(B, S, H, D, device="cuda", dtype=torch.bfloat16) * 2 - 1).requires_grad_(i < 3)
                   for i in range(4)]
    for it in range(2):
        o = flash_attn_func(q, k, v, softmax_scale=D ** -0.5, causal=causal)
        o = o[0] if isinstance(o, (tuple, list)) else o
        torch.cuda.synchronize()
        if it == 1:
            torch.cuda.profiler.start()
        torch.autograd.grad(o, (q, k, v), do)
        torch.cuda.synchronize()
        if it == 1:
            torch.cuda.profiler.stop()
    print("fa4_prof: one backward profiled,", S, "causal" if causal else "full")


if __name__ == "__main__":
    main()
