#!/usr/bin/env python3
"""peers.py - time FlexAttention and cuDNN SDPA on the masks fmbench used.

Reads the masks fmbench wrote (HDF5: /masks/<name> with lts/lte/uts/ute int32[mask_heads][seqlen_k],
or [mask_batch][mask_heads][seqlen_k] for per-sample masks (fmbench -mask_batch; doc/format.md)
(the vectors the mask uses; absent ones take their default form) and attributes seqlen_q,
seqlen_k, causal, type, mask_heads, mask_batch (absent: 1)) and, for each mask, times on the
same shapes:
  * FlexAttention (torch.compile'd flex_attention), with a BlockMask built from our bounds: the
    same tile classes as the library (skip / full / partial from the 128-block min/max summaries)
    and a mask_mod that applies the exact column-bound test on partial blocks. A per-sample mask
    gives a BlockMask with a batch dimension (one block list per sample and mask head) and the
    batch is its mask_batch (not -tokens / seqlen);
  * cuDNN SDPA (torch sdpa_kernel CUDNN_ATTENTION) for the full and causal masks.
CUDA events, a warm-up and the median of -reps runs. Random bf16 inputs (never zeros).
Prints one line per mask and writes a CSV (-csv): mask,seqlen,batch,flex_ms,cudnn_ms.

usage: peers.py MASKFILE [-heads 32] [-head_dim 128] [-tokens 131072] [-reps 10] [-warmup 3]
                [-dtype bf16] [-masks all|a,b] [-csv out.csv]
"""
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def opt(name, default, conv=str):
    if name in sys.argv:
        return conv(sys.argv[sys.argv.index(name) + 1])
    return default


def load_masks(path):
    """Yield (name, type, Sq, Sk, causal, mask_batch, [lts, lte, uts, ute]) with numpy int32
    [mask_batch][mh][Sk] arrays (mask_batch 1 for masks shared by every sample)."""
    import h5py
    with h5py.File(path, "r") as f:
        for name in f["masks"]:
            g = f["masks"][name]
            a = g.attrs
            typ = a.get("type", name)
            if isinstance(typ, bytes):
                typ = typ.decode()
            sq, sk = int(a["seqlen_q"]), int(a["seqlen_k"])
            mh = int(a.get("mask_heads", 1))
            mb = int(a.get("mask_batch", 1))
            vec = []
            # only the vectors in 'present' are stored: absent ones take their default form
            # (lts = lte = seqlen_q, uts = ute = 0), as FMMaskGetBounds returns them
            for v, dflt in (("lts", sq), ("lte", sq), ("uts", 0), ("ute", 0)):
                if v in g:
                    x = np.asarray(g[v][...], dtype=np.int32)
                    vec.append(x.reshape(mb, mh, sk))  # [sk], [mh][sk] or [mb][mh][sk] as stored
                else:
                    vec.append(np.full((mb, mh, sk), dflt, dtype=np.int32))
            yield name, str(typ), sq, sk, int(a["causal"]), mb, vec


def tile_classes(b, causal, Sq, Sk, blk=128):
    """skip, partial masks [rows, nq, nk] from the block summaries (doc/format.md section 2);
    b: the four vectors as [rows][Sk] (rows = mask_batch * mask_heads)."""
    lts, lte, uts, ute = b
    mh = lts.shape[0]
    nk = (Sk + blk - 1) // blk
    nq = (Sq + blk - 1) // blk
    pad = nk * blk - Sk
    big, small = 2**31 - 1, -(2**31)

    def mm(x):
        xmin = F.pad(x, (0, pad), value=big).view(mh, nk, blk).amin(-1)
        xmax = F.pad(x, (0, pad), value=small).view(mh, nk, blk).amax(-1)
        return xmin[:, None, :], xmax[:, None, :]

    ltsmin, ltsmax = mm(lts)
    ltemin, ltemax = mm(lte)
    utsmin, utsmax = mm(uts)
    utemin, utemax = mm(ute)
    dev = lts.device
    m0 = (torch.arange(nq, device=dev) * blk)[None, :, None]
    m1 = torch.clamp(m0 + blk, max=Sq)
    c0 = (torch.arange(nk, device=dev) * blk)[None, None, :]
    c1 = torch.clamp(c0 + blk, max=Sk)
    off = Sk - Sq
    skip = ((m0 >= ltsmax) & (m1 <= ltemin)) | ((m0 >= utsmax) & (m1 <= utemin))
    part = ((m0 < ltemax) & (m1 > ltsmin)) | ((m0 < utemax) & (m1 > utsmin))
    if causal:
        skip = skip | (c0 > m1 - 1 + off)
        part = part | (c1 - 1 > m0 + off)
    part = part & ~skip
    return skip, part


def flex_block_mask(b, causal, Sq, Sk, H):
    """BlockMask of the four vectors b ([mask_batch][mh][Sk] each): batch dimension mask_batch
    (1 broadcasts over the batch), head dimension mh (1 broadcasts over the heads)."""
    from torch.nn.attention.flex_attention import BlockMask
    lts, lte, uts, ute = b
    mb, mh = lts.shape[0], lts.shape[1]
    skip, part = tile_classes([x.reshape(mb * mh, Sk) for x in b], causal, Sq, Sk)
    full = ~skip & ~part

    def lists(m):  # m: [mb * mh, nq, nk] -> num [mb, mh, nq], idx [mb, mh, nq, nk]
        num = m.sum(-1).to(torch.int32)
        idx = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return num.view(mb, mh, *num.shape[1:]).contiguous(), idx.view(mb, mh, *idx.shape[1:]).contiguous()

    kv_num, kv_idx = lists(part)
    full_num, full_idx = lists(full)
    off = Sk - Sq
    grp = max(H // mh, 1)

    def mask_mod(bb, h, q, kv):
        hh = h // grp if mh > 1 else 0
        s = bb if mb > 1 else 0  # the sample's own bounds, or the shared ones
        masked = ((q >= lts[s, hh, kv]) & (q < lte[s, hh, kv])) | ((q >= uts[s, hh, kv]) & (q < ute[s, hh, kv]))
        if causal:
            masked = masked | (kv > q + off)
        return ~masked

    bm = BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=128, mask_mod=mask_mod,
                                  seq_lengths=(Sq, Sk))
    return bm


def time_fn(fn, warm, reps):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return float(np.median(ts))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    path = sys.argv[1]
    H = opt("-heads", 32, int)
    D = opt("-head_dim", 128, int)
    tokens = opt("-tokens", 131072, int)
    reps = opt("-reps", 10, int)
    warm = opt("-warmup", 3, int)
    sel = opt("-masks", "all")
    csv = opt("-csv", "")
    dtype = torch.float16 if opt("-dtype", "bf16") == "fp16" else torch.bfloat16
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
    torch.manual_seed(0)
    rows = []
    cache = {}
    print("%-22s %6s %3s %10s %10s" % ("mask", "seqlen", "B", "flex_ms", "cudnn_ms"), flush=True)
    for name, typ, Sq, Sk, causal, mb, vec in load_masks(path):
        if sel != "all" and typ not in sel.split(","):
            continue
        B = mb if mb > 1 else max(tokens // Sk, 1)  # a per-sample mask fixes the batch
        key = (B, Sq, Sk)
        if key not in cache:
            cache.clear()
            torch.cuda.empty_cache()
            q = (torch.rand(B, H, Sq, D, device="cuda", dtype=dtype) * 3 - 1.5)
            k = (torch.rand(B, H, Sk, D, device="cuda", dtype=dtype) * 3 - 1.5)
            v = (torch.rand(B, H, Sk, D, device="cuda", dtype=dtype) * 2 - 1)
            cache[key] = (q, k, v)
        q, k, v = cache[key]
        b = [torch.from_numpy(np.ascontiguousarray(x)).to("cuda", torch.int32) for x in vec]
        flex_ms = float("nan")
        cudnn_ms = float("nan")
        try:
            bm = flex_block_mask(b, causal, Sq, Sk, H)
            flex_ms = time_fn(lambda: flex(q, k, v, block_mask=bm, scale=D ** -0.5), warm, reps)
        except Exception as e:  # report and go on: one failing peer must not hide the others
            print("  flex failed on %s: %s" % (name, str(e).splitlines()[0] if str(e) else type(e).__name__), flush=True)
        if typ in ("full", "causal"):
            try:
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    cudnn_ms = time_fn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal),
                                                                               scale=D ** -0.5), warm, reps)
            except Exception as e:
                print("  cudnn failed on %s: %s" % (name, str(e).splitlines()[0]), flush=True)
        print("%-22s %6d %3d %10.3f %10.3f" % (typ, Sk, B, flex_ms, cudnn_ms), flush=True)
        rows.append((typ, Sk, B, flex_ms, cudnn_ms))
    if csv:
        with open(csv, "w") as f:
            f.write("mask,seqlen,batch,flex_ms,cudnn_ms\n")
            for r in rows:
                f.write("%s,%d,%d,%.4f,%.4f\n" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
