#!/usr/bin/env python3
"""peers_cp.py - PyTorch's context parallelism on the same GPUs as fmbench -cp, causal mask only.

    torchrun --standalone --nproc_per_node=P share/bench/peers_cp.py \
        --seqlen 65536,131072 --heads 32 --heads-kv 32,8 --head-dim 128 \
        --pass fwd,fwdbwd --rotate alltoall,allgather --reps 5 --warmup 2 --csv torch_cp.csv

What runs: torch.distributed.tensor.experimental.context_parallel over a one-dimensional device
mesh of all ranks, with torch.nn.functional.scaled_dot_product_attention restricted to the cuDNN
backend (sdpa_kernel(CUDNN_ATTENTION)). context_parallel shards Q, K, V and dO along the sequence
with its default head-tail load balancer (each rank holds chunk r and chunk 2P-1-r, which evens
out the causal work) and runs the ring of cuDNN calls, merging the partial outputs by their LSE.
--rotate picks how K/V move between the ring's steps: "alltoall" passes each rank's K/V to the
next rank at every step (the ring proper), "allgather" gathers all K/V once at the first step
(PyTorch's default). Each (length, KV heads, rotate method) is one context; inside it, per pass,
--warmup runs, then --reps runs, each between torch.cuda.synchronize and a barrier, timed with
time.perf_counter; a run's time is the maximum over the ranks and the median is reported.

With fewer KV heads than heads, SDPA gets enable_gqa=True; if the cuDNN CP path refuses it, K and
V are repeated to every head before sharding (more bytes in the ring; the row's note says
kv_expanded). The full KV head count runs first; a failure inside a context with fewer KV heads
ends the runs (rows so far kept, exit status 1).

The CSV's first columns are those of fmbench -cp's CSV (mask, seqlen, config, pass, ranks, batch,
heads, heads_kv, head_dim, dtype, ms, tflops), then note; config is torch_cp_<rotate>. TFLOP/s
follow the FlashMask convention fmbench uses: forward 4 H S^2 d times the fraction of 128 x 128
tiles not fully masked (for causal (n + 1) / 2n with n = S / 128), backward 2.5 and forward +
backward 3.5 forwards.

Without torch or without GPUs it exits 77 with a message; --help and --self-test need neither.
"""
import argparse
import os
import statistics
import sys
import time

CSV_HEAD = "mask,seqlen,config,pass,ranks,batch,heads,heads_kv,head_dim,dtype,ms,tflops,note"
PASS_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwdbwd": 3.5}


def causal_flops(seqlen, heads, head_dim, block=128):
    """Forward FLOPs of one causal sequence under the FlashMask convention."""
    n = (seqlen + block - 1) // block
    live = n * (n + 1) // 2  # tiles on or below the diagonal
    return 4.0 * heads * seqlen * seqlen * head_dim * live / (n * n)


def int_list(text):
    out = [int(x) for x in text.split(",") if x]
    if not out or min(out) <= 0:
        raise argparse.ArgumentTypeError("expected positive integers separated by commas, got %r" % text)
    return out


def name_list(allowed):
    def parse(text):
        out = [x for x in text.split(",") if x]
        bad = [x for x in out if x not in allowed]
        if bad or not out:
            raise argparse.ArgumentTypeError("unknown %r; expected some of %s" % (",".join(bad) or text, ",".join(allowed)))
        return out
    return parse


def parse_args(argv):
    ap = argparse.ArgumentParser(description="PyTorch context parallel (cuDNN SDPA ring, head-tail load balance), causal only")
    ap.add_argument("--seqlen", type=int_list, default=[65536, 131072], help="total sequence lengths (comma-separated)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-kv", type=int_list, default=[32], help="KV head counts (comma-separated)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--pass", dest="passes", type=name_list(["fwd", "fwdbwd"]), default=["fwd", "fwdbwd"], help="fwd,fwdbwd")
    ap.add_argument("--rotate", type=name_list(["alltoall", "allgather"]), default=["alltoall"], help="alltoall (the ring), allgather")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--csv", default="", help="write the rows here (rank 0)")
    ap.add_argument("--self-test", action="store_true", help="check the FLOP count and the argument parsing (no torch needed)")
    a = ap.parse_args(argv)
    for h in a.heads_kv:
        if a.heads % h:
            ap.error("--heads %d is not a multiple of --heads-kv %d" % (a.heads, h))
    if a.reps < 1 or a.warmup < 0:
        ap.error("--reps must be >= 1 and --warmup >= 0")
    return a


def self_test():
    ok = 0
    # 256 tokens: 2 x 2 tiles, 3 live -> 3/4 of the full count
    assert causal_flops(256, 2, 64) == 4.0 * 2 * 256 * 256 * 64 * 0.75
    ok += 1
    # one tile: nothing is fully masked
    assert causal_flops(128, 1, 128) == 4.0 * 128 * 128 * 128
    ok += 1
    a = parse_args(["--seqlen", "1024,2048", "--heads", "8", "--heads-kv", "8,2", "--pass", "fwdbwd", "--rotate", "allgather,alltoall"])
    assert a.seqlen == [1024, 2048] and a.heads_kv == [8, 2] and a.passes == ["fwdbwd"] and a.rotate == ["allgather", "alltoall"]
    ok += 1
    for bad in (["--pass", "bwd2"], ["--heads", "6", "--heads-kv", "4"], ["--seqlen", "0"], ["--rotate", "ring"]):
        try:
            with open(os.devnull, "w") as null:
                saved, sys.stderr = sys.stderr, null
                try:
                    parse_args(bad)
                finally:
                    sys.stderr = saved
        except SystemExit:
            ok += 1
            continue
        raise AssertionError("accepted %s" % bad)
    assert CSV_HEAD.split(",")[:12] == ["mask", "seqlen", "config", "pass", "ranks", "batch", "heads", "heads_kv", "head_dim", "dtype", "ms", "tflops"]
    ok += 1
    print("ok: %d checks (FLOP count, argument parsing, CSV columns)" % ok)
    return 0


def load_torch():
    """The torch pieces, or None (with the reason printed) when they are missing."""
    try:
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.experimental import context_parallel
        try:
            from torch.distributed.tensor.experimental._context_parallel import set_rotate_method
        except ImportError:
            from torch.distributed.tensor.experimental._attention import set_rotate_method
    except Exception as e:  # any import failure: no usable torch here
        print("peers_cp.py: no usable PyTorch context parallel here (%s: %s)" % (type(e).__name__, e), file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print("peers_cp.py: torch sees no GPU", file=sys.stderr)
        return None
    return dict(torch=torch, dist=dist, F=F, SDPBackend=SDPBackend, sdpa_kernel=sdpa_kernel, init_device_mesh=init_device_mesh,
                context_parallel=context_parallel, set_rotate_method=set_rotate_method)


class Bench:
    def __init__(self, T, a):
        self.T, self.a = T, a
        torch, dist = T["torch"], T["dist"]
        self.local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(self.local)
        self.dev = torch.device("cuda", self.local)
        dist.init_process_group("nccl", device_id=self.dev)
        self.rank, self.P = dist.get_rank(), dist.get_world_size()
        self.mesh = T["init_device_mesh"]("cuda", (self.P,))

    def sync_max(self, x):
        """Synchronize the device, then the maximum of x over the ranks (also a barrier)."""
        torch, dist = self.T["torch"], self.T["dist"]
        t = torch.tensor([x], dtype=torch.float64, device=self.dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def timed(self, step):
        torch = self.T["torch"]
        for _ in range(self.a.warmup):
            step()
        ts = []
        for _ in range(self.a.reps):
            torch.cuda.synchronize()
            self.sync_max(0.0)
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            ts.append(self.sync_max(time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    def gqa_ok(self, hkv):
        """Whether cuDNN SDPA takes enable_gqa with hkv KV heads (a small forward and backward on
        this GPU alone, before any context: the backend is chosen the same way inside one).
        Every rank gets the same answer (same build, same GPU model)."""
        torch, F = self.T["torch"], self.T["F"]
        q = torch.randn(1, self.a.heads, 256, self.a.head_dim, device=self.dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, hkv, 256, self.a.head_dim, device=self.dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, hkv, 256, self.a.head_dim, device=self.dev, dtype=torch.bfloat16, requires_grad=True)
        try:
            with self.T["sdpa_kernel"]([self.T["SDPBackend"].CUDNN_ATTENTION]):
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
            torch.cuda.synchronize()
            ok = 1.0
        except (RuntimeError, NotImplementedError, ValueError) as e:
            if self.rank == 0:
                print("  cuDNN SDPA refuses enable_gqa (%s); K/V repeated to %d heads" % (str(e).splitlines()[0][:120], self.a.heads))
            ok = 0.0
        return -self.sync_max(-ok) > 0.5  # the minimum over the ranks

    def case(self, S, hkv, rotate, expand):
        """Every pass of one (length, KV heads, rotate method); {pass: ms}. Collective."""
        T, a = self.T, self.a
        torch, F = T["torch"], T["F"]
        T["set_rotate_method"](rotate)
        g = torch.Generator(device=self.dev)
        g.manual_seed(a.seed)  # the same global tensors on every rank; context_parallel keeps each rank's shards
        bf = torch.bfloat16
        q = torch.randn(1, a.heads, S, a.head_dim, device=self.dev, dtype=bf, generator=g)
        k = torch.randn(1, hkv, S, a.head_dim, device=self.dev, dtype=bf, generator=g)
        v = torch.randn(1, hkv, S, a.head_dim, device=self.dev, dtype=bf, generator=g)
        do = torch.randn(1, a.heads, S, a.head_dim, device=self.dev, dtype=bf, generator=g)
        gqa = hkv != a.heads
        if gqa and expand:
            k = k.repeat_interleave(a.heads // hkv, dim=1).contiguous()
            v = v.repeat_interleave(a.heads // hkv, dim=1).contiguous()
            gqa = False
        kw = {"is_causal": True}
        if gqa:
            kw["enable_gqa"] = True
        bufs = [q, k, v, do]
        out = {}
        with T["sdpa_kernel"]([T["SDPBackend"].CUDNN_ATTENTION]):
            with T["context_parallel"](self.mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2, 2], no_restore_buffers=set(bufs)):
                for p in a.passes:
                    if p == "fwd":
                        def step():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, **kw)
                    else:
                        for t in (q, k, v):
                            t.requires_grad_(True)

                        def step():
                            o = F.scaled_dot_product_attention(q, k, v, **kw)
                            o.backward(do)
                            for t in (q, k, v):
                                t.grad = None
                    out[p] = self.timed(step)
        return out

    def run(self):
        a = self.a
        fp = open(a.csv, "w") if a.csv and self.rank == 0 else None
        if fp:
            fp.write(CSV_HEAD + "\n")
        if self.rank == 0:
            print("peers_cp.py: PyTorch %s context parallel on %d ranks (%s), cuDNN SDPA, head-tail load balance, causal"
                  % (self.T["torch"].__version__, self.P, self.T["torch"].cuda.get_device_name(self.dev)), flush=True)
            print("%-8s %7s %-19s %-6s %5s %4s %10s %8s %s" % ("mask", "seqlen", "config", "pass", "heads", "kv", "ms", "TFLOP/s", "note"))
        failed = 0
        # the full KV head count first: a GQA failure inside a context (which leaves PyTorch's
        # dispatcher patched) then ends the runs after every MHA row is in
        for hkv in sorted(a.heads_kv, reverse=True):
            expand = hkv != a.heads and not self.gqa_ok(hkv)
            for S in a.seqlen:
                for rotate in a.rotate:
                    note = "kv_expanded" if expand else ""
                    try:
                        ms = self.case(S, hkv, rotate, expand)
                    except (RuntimeError, NotImplementedError, ValueError) as e:
                        if hkv == a.heads or expand:
                            raise
                        if self.rank == 0:
                            print("peers_cp.py: H_kv = %d failed inside context_parallel (%s); no further runs" % (hkv, str(e).splitlines()[0][:160]),
                                  flush=True)
                        failed = 1
                        break
                    for p in a.passes:
                        tf = causal_flops(S, a.heads, a.head_dim) * PASS_FACTOR[p] / (ms[p] * 1e-3) / 1e12
                        row = "causal,%d,torch_cp_%s,%s,%d,1,%d,%d,%d,bf16,%.4f,%.2f,%s" % (S, rotate, p, self.P, a.heads, hkv, a.head_dim,
                                                                                         ms[p], tf, note)
                        if self.rank == 0:
                            print("%-8s %7d %-19s %-6s %5d %4d %10.3f %8.1f %s" % ("causal", S, "torch_cp_" + rotate, p, a.heads, hkv, ms[p], tf,
                                                                                note), flush=True)
                        if fp:
                            fp.write(row + "\n")
                            fp.flush()
                if failed:
                    break
            if failed:
                break
        if fp:
            fp.close()
        self.T["dist"].destroy_process_group()
        return failed


def main(argv):
    a = parse_args(argv)
    if a.self_test:
        return self_test()
    T = load_torch()
    if T is None:
        return 77
    return Bench(T, a).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
