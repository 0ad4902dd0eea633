#!/usr/bin/env python3
"""peers.py - time the peers' attention on the masks fmbench used: forward, backward, or both.

Reads the masks fmbench wrote (HDF5: /masks/<name> with lts/lte/uts/ute int32[mask_heads][seqlen_k],
or [mask_batch][mask_heads][seqlen_k] for per-sample masks (fmbench -mask_batch; doc/format.md)
(the vectors the mask uses; absent ones take their default form) and attributes seqlen_q,
seqlen_k, causal, type, mask_heads, mask_batch (absent: 1)) and, for each mask and pass, times
on the same shapes:
  * flex:       FlexAttention (torch.compile'd flex_attention, its default Triton kernel), with a
                BlockMask built from our bounds: the same tile classes as the library (skip / full /
                partial from the 128-block min/max summaries) and a mask_mod that applies the exact
                column-bound test on partial blocks. A per-sample mask (mask_batch > 1) gives a
                BlockMask with a batch dimension (one block list per sample and mask head) and the
                batch is its mask_batch (not -tokens / seqlen);
  * flex_flash: the same call and BlockMask with kernel_options BACKEND="FLASH" (FlashAttention-4's
                block-sparse mask_mod path);
  * cudnn:      cuDNN SDPA (sdpa_kernel CUDNN_ATTENTION), full and causal masks only;
  * fa4:        FlashAttention-4 dense (flash_attn.cute.flash_attn_func, package flash-attn-4),
                full and causal masks only; "n/a" everywhere when it is not installed.
Passes (--pass, a comma list): fwd (the forward alone), bwd (the backward alone: one forward
with its graph kept, outside the timing, then each timed run is torch.autograd.grad(out, (q, k,
v), dO, retain_graph=True) between two CUDA events), fwdbwd (forward + backward in each run).
The BlockMask is built once per mask, outside the timing; FlexAttention's own create_block_mask
on the same mask_mod is timed separately (cbm_ms: median of 3 calls after a first one, host wall
clock to a synchronized end; --cbm 0 skips it).
CUDA events, -warmup runs, the median of -reps runs. Random inputs (never zeros). Times only:
TFLOP/s come from compare.sh with fmbench's FLOP count (FlashMask convention: forward
4 B H S^2 d (1 - rho), backward 2.5x, fwdbwd 3.5x), one definition for us and every peer.
Prints one line per mask and pass and writes a CSV (-csv):
  mask,seqlen,batch,flex_ms,cudnn_ms,pass,mask_batch,flex_flash_ms,fa4_ms,cbm_ms
(nan where a peer does not run the mask or failed: the reason is printed).

usage: peers.py MASKFILE... [-heads 32] [-head_dim 128] [-tokens 131072] [-reps 10] [-warmup 3]
                [-dtype bf16] [-masks all|a,b] [-csv out.csv] [--pass fwd,bwd,fwdbwd]
                [--peers flex,flex_flash,cudnn,fa4] [--cbm 0|1]
       peers.py --self-test [MASKFILE...]   (no GPU, no torch: the argument parsing and, where numpy
                and h5py are installed, the HDF5 reading, on a file it writes and on each MASKFILE)
Every option takes one or two dashes.
"""
import argparse
import os
import sys
import tempfile
import time

PASSES = ("fwd", "bwd", "fwdbwd")
PEERS = ("flex", "flex_flash", "cudnn", "fa4")
CSV_COLUMNS = ("mask", "seqlen", "batch", "flex_ms", "cudnn_ms", "pass", "mask_batch", "flex_flash_ms", "fa4_ms", "cbm_ms")


def comma_list(allowed, what):
    def conv(s):
        items = [x for x in s.split(",") if x]
        for x in items:
            if x not in allowed:
                raise argparse.ArgumentTypeError("unknown %s '%s'; expected %s" % (what, x, ", ".join(allowed)))
        if not items:
            raise argparse.ArgumentTypeError("empty %s list" % what)
        return items
    return conv


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="peers.py", allow_abbrev=False, add_help=False,
                                 description="Time FlexAttention (Triton and BACKEND=FLASH), cuDNN SDPA and "
                                             "FlashAttention-4 on fmbench's masks (see the module docstring).")
    ap.add_argument("maskfiles", nargs="*", metavar="MASKFILE",
                    help="HDF5 mask files written by fmbench -o (several: timed in one process, one CSV)")
    ap.add_argument("-h", "-help", "--help", action="help", help="show this help and exit")
    opts = (("heads", int, 32, "query (= key/value) heads"), ("head_dim", int, 128, "head dimension"),
            ("tokens", int, 131072, "tokens per batch (batch = tokens / seqlen unless the mask has a batch)"),
            ("reps", int, 10, "timed runs (the median is reported)"), ("warmup", int, 3, "warm-up runs"),
            ("warmup_s", float, 0.0, "then seconds of back-to-back runs before the timed ones (the power-capped steady state)"),
            ("dtype", str, "bf16", "bf16 or fp16"), ("masks", str, "all", "mask types to time (comma list) or all"),
            ("csv", str, "", "CSV output file"), ("cbm", int, 1, "1: time create_block_mask too, 0: skip"))
    for name, typ, dflt, hlp in opts:
        ap.add_argument("-" + name, "--" + name, type=typ, default=dflt, help=hlp)
    ap.add_argument("-pass", "--pass", dest="passes", type=comma_list(PASSES, "pass"), default=["fwd"],
                    help="passes to time: a comma list of fwd, bwd, fwdbwd (default fwd)")
    ap.add_argument("-peers", "--peers", type=comma_list(PEERS, "peer"), default=list(PEERS),
                    help="peers to time: a comma list of %s (default all)" % ", ".join(PEERS))
    ap.add_argument("-self-test", "--self-test", dest="self_test", action="store_true",
                    help="check the argument parsing and the HDF5 reading (no GPU, no torch)")
    a = ap.parse_args(argv)
    if a.dtype not in ("bf16", "fp16"):
        ap.error("-dtype %s: expected bf16 or fp16" % a.dtype)
    if a.reps < 1 or a.warmup < 0:
        ap.error("-reps must be >= 1 and -warmup >= 0")
    if not 0 <= a.warmup_s <= 600:
        ap.error("-warmup_s is %g; expected seconds from 0 to 600" % a.warmup_s)
    if not a.self_test and not a.maskfiles:
        ap.error("a MASKFILE (fmbench -o) is required")
    return a


def load_masks(path):
    """Yield (name, type, Sq, Sk, causal, mask_batch, [lts, lte, uts, ute]) with numpy int32
    [mask_batch][mh][Sk] arrays (mask_batch 1 for masks shared by every sample)."""
    import h5py
    import numpy as np
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


def tile_classes(torch, b, causal, Sq, Sk, blk=128):
    """skip, partial masks [rows, nq, nk] from the block summaries (doc/format.md section 2);
    b: the four vectors as [rows][Sk] (rows = mask_batch * mask_heads)."""
    F = torch.nn.functional
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


def make_mask_mod(b, causal, Sq, Sk, grp):
    """The exact column-bound test as a FlexAttention mask_mod (True = visible). b: the four
    vectors [mask_batch][mh][Sk]; head h reads mask head h // grp (mh > 1), sample bb its own
    bounds (mask_batch > 1)."""
    lts, lte, uts, ute = b
    mb, mh = lts.shape[0], lts.shape[1]
    off = Sk - Sq

    # index only by the dimensions that vary: FA4's mask_mod lowering (FlexAttention BACKEND=FLASH)
    # rejects a constant index ("Expected TensorSSA, but got int")
    if mb == 1 and mh == 1:
        v = [x[0, 0].contiguous() for x in b]
        at = lambda x, bb, h, kv: x[kv]
    elif mb == 1:
        v = [x[0].contiguous() for x in b]
        at = lambda x, bb, h, kv: x[h // grp, kv]
    elif mh == 1:
        v = [x[:, 0].contiguous() for x in b]
        at = lambda x, bb, h, kv: x[bb, kv]
    else:
        v = list(b)
        at = lambda x, bb, h, kv: x[bb, h // grp, kv]
    l0, l1, u0, u1 = v

    def mask_mod(bb, h, q, kv):
        masked = ((q >= at(l0, bb, h, kv)) & (q < at(l1, bb, h, kv))) | ((q >= at(u0, bb, h, kv)) & (q < at(u1, bb, h, kv)))
        if causal:
            masked = masked | (kv > q + off)
        return ~masked
    return mask_mod


def flex_block_mask(torch, b, causal, Sq, Sk, H):
    """BlockMask of the four vectors b ([mask_batch][mh][Sk] each): batch dimension mask_batch
    (1 broadcasts over the batch), head dimension mh (1 broadcasts over the heads)."""
    from torch.nn.attention.flex_attention import BlockMask
    mb, mh = b[0].shape[0], b[0].shape[1]
    skip, part = tile_classes(torch, [x.reshape(mb * mh, Sk) for x in b], causal, Sq, Sk)
    full = ~skip & ~part

    def lists(m):  # m: [mb * mh, nq, nk] -> num [mb, mh, nq], idx [mb, mh, nq, nk]
        num = m.sum(-1).to(torch.int32)
        idx = torch.argsort((~m).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return num.view(mb, mh, *num.shape[1:]).contiguous(), idx.view(mb, mh, *idx.shape[1:]).contiguous()

    kv_num, kv_idx = lists(part)
    full_num, full_idx = lists(full)
    mask_mod = make_mask_mod(b, causal, Sq, Sk, max(H // mh, 1))
    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=128, mask_mod=mask_mod,
                                    seq_lengths=(Sq, Sk))


def time_create_block_mask(torch, b, causal, Sq, Sk, reps=3):
    """ms of FlexAttention's create_block_mask on the same mask (median of reps after a first
    call); batch and head dimensions as the mask has them (None where shared)."""
    from torch.nn.attention.flex_attention import create_block_mask
    mb, mh = b[0].shape[0], b[0].shape[1]
    mod = make_mask_mod(b, causal, Sq, Sk, 1)
    args = (mod, mb if mb > 1 else None, mh if mh > 1 else None, Sq, Sk)
    create_block_mask(*args, device="cuda", BLOCK_SIZE=128)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        create_block_mask(*args, device="cuda", BLOCK_SIZE=128)
        torch.cuda.synchronize()
        ts.append(1e3 * (time.perf_counter() - t0))
    return sorted(ts)[len(ts) // 2]


def time_fn(torch, fn, warm, reps, pre=None, warm_s=0.0):
    """Median ms of fn() between two CUDA events. pre(): untimed, run (and synchronized) before
    each run; its result is passed to fn. After the warm runs, warm_s seconds of back-to-back
    runs: the steady state under the GPU's power cap (as fmbench -warmup_s)."""
    for _ in range(warm):
        fn(pre()) if pre else fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        for _ in range(4):
            fn(pre()) if pre else fn()
        torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        arg = pre() if pre else None
        if pre:
            torch.cuda.synchronize()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn(arg) if pre else fn()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return sorted(ts)[len(ts) // 2]


def time_pass(torch, attn, q, k, v, dout, pas, warm, reps, warm_s=0.0):
    """Median ms of one pass of attn(q, k, v) -> out (tensors in attn's own layout)."""
    if pas == "fwd":
        with torch.no_grad():
            return time_fn(torch, lambda: attn(q, k, v), warm, reps, warm_s=warm_s)
    qg, kg, vg = [x.detach().requires_grad_(True) for x in (q, k, v)]
    if pas == "fwdbwd":
        return time_fn(torch, lambda: torch.autograd.grad(attn(qg, kg, vg), (qg, kg, vg), dout), warm, reps, warm_s=warm_s)
    out = attn(qg, kg, vg)  # bwd: one forward with its graph kept, outside the timing
    try:
        return time_fn(torch, lambda: torch.autograd.grad(out, (qg, kg, vg), dout, retain_graph=True), warm, reps, warm_s=warm_s)
    except RuntimeError as e:  # a backward that refuses retain_graph: a fresh untimed forward before each run
        if "retain_graph" not in str(e) and "donated" not in str(e):
            raise
        del out
        return time_fn(torch, lambda o: torch.autograd.grad(o, (qg, kg, vg), dout), warm, reps,
                       pre=lambda: attn(qg, kg, vg), warm_s=warm_s)


def load_fa4():
    """FlashAttention-4's flash_attn_func, or (None, reason)."""
    import importlib
    errs = []
    for modname in ("flash_attn.cute", "flash_attn.cute.interface", "flash_attn_cute"):
        try:
            mod = importlib.import_module(modname)
        except Exception as e:  # absent, or a broken install: say which
            errs.append("%s: %s" % (modname, str(e).splitlines()[0] if str(e) else type(e).__name__))
            continue
        fn = getattr(mod, "flash_attn_func", None)
        if fn is not None:
            return fn, modname
        errs.append("%s has no flash_attn_func" % modname)
    return None, "; ".join(errs)


def first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def short(e):
    s = str(e).strip()
    return s.splitlines()[0][:200] if s else type(e).__name__


class Inputs:
    """Random q, k, v, dO of one shape, [B, H, S, D] (torch's layout), and their [B, S, H, D]
    copies for FlashAttention-4 made on first use."""
    def __init__(self, torch, B, H, Sq, Sk, D, dtype):
        self.q = torch.rand(B, H, Sq, D, device="cuda", dtype=dtype) * 3 - 1.5
        self.k = torch.rand(B, H, Sk, D, device="cuda", dtype=dtype) * 3 - 1.5
        self.v = torch.rand(B, H, Sk, D, device="cuda", dtype=dtype) * 2 - 1
        self.dout = torch.rand(B, H, Sq, D, device="cuda", dtype=dtype) * 2 - 1
        self.bshd = None

    def fa4_layout(self):
        if self.bshd is None:
            self.bshd = [x.transpose(1, 2).contiguous() for x in (self.q, self.k, self.v, self.dout)]
        return self.bshd


def time_mask(torch, ctx, a, typ, Sq, Sk, causal, mb, vec, x):
    """Every chosen peer and pass on one mask: {pass: {peer: ms}}, and the create_block_mask ms."""
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import numpy as np
    H, D, scale = a.heads, a.head_dim, a.head_dim ** -0.5
    res = {p: {} for p in a.passes}
    b = [torch.from_numpy(np.ascontiguousarray(y)).to("cuda", torch.int32) for y in vec]
    dense = typ in ("full", "causal")
    bm = None
    if "flex" in a.peers or "flex_flash" in a.peers:
        try:
            bm = flex_block_mask(torch, b, causal, Sq, Sk, H)
        except Exception as e:
            print("  BlockMask failed on %s: %s" % (typ, short(e)), flush=True)
    attn = {}
    if bm is not None:
        flex = ctx["flex"]
        attn["flex"] = lambda q, k, v: flex(q, k, v, block_mask=bm, scale=scale)
        attn["flex_flash"] = lambda q, k, v: flex(q, k, v, block_mask=bm, scale=scale, kernel_options={"BACKEND": "FLASH"})
    if dense:
        def cudnn(q, k, v):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), scale=scale)
        attn["cudnn"] = cudnn
        if ctx["fa4"] is not None:
            fa4 = ctx["fa4"]
            attn["fa4"] = lambda q, k, v: first(fa4(q, k, v, softmax_scale=scale, causal=bool(causal)))
    for pas in a.passes:
        for peer in a.peers:
            if peer not in attn:
                continue
            q, k, v, dout = x.fa4_layout() if peer == "fa4" else (x.q, x.k, x.v, x.dout)
            try:
                res[pas][peer] = time_pass(torch, attn[peer], q, k, v, dout, pas, a.warmup, a.reps, a.warmup_s)
            except Exception as e:  # report and go on: one failing peer must not hide the others
                print("  %s %s failed on %s: %s" % (peer, pas, typ, short(e)), flush=True)
    cbm = float("nan")
    if a.cbm and bm is not None:
        try:
            cbm = time_create_block_mask(torch, b, causal, Sq, Sk)
        except Exception as e:
            print("  create_block_mask failed on %s: %s" % (typ, short(e)), flush=True)
        torch.cuda.empty_cache()
    return res, cbm


def run(a):
    import torch
    try:  # the compiled backward's donated buffers forbid retain_graph; bwd times the backward alone
        import torch._functorch.config as fconf
        fconf.donated_buffer = False
    except Exception:
        pass
    try:  # one compiled entry per mask, pass and backend: more than dynamo's default of 8
        import torch._dynamo.config as dconf
        for lim in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
            if isinstance(getattr(dconf, lim, None), int):
                setattr(dconf, lim, max(getattr(dconf, lim), 512))
    except Exception:
        pass
    from torch.nn.attention.flex_attention import flex_attention
    dtype = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    ctx = {"flex": torch.compile(flex_attention, dynamic=False), "fa4": None}
    if "fa4" in a.peers:
        ctx["fa4"], where = load_fa4()
        print("peers: FlashAttention-4 %s" % ("from " + where if ctx["fa4"] else "MISSING (fa4 column n/a): " + where),
              flush=True)
    torch.manual_seed(0)
    rows, cache = [], {}
    print("%-22s %6s %3s %-6s %10s %10s %10s %10s %10s" % ("mask", "seqlen", "B", "pass", "flex_ms", "flash_ms", "cudnn_ms",
                                                          "fa4_ms", "cbm_ms"), flush=True)
    for name, typ, Sq, Sk, causal, mb, vec in (m for path in a.maskfiles for m in load_masks(path)):
        if a.masks != "all" and typ not in a.masks.split(","):
            continue
        B = mb if mb > 1 else max(a.tokens // Sk, 1)  # a per-sample mask fixes the batch
        key = (B, Sq, Sk)
        if key not in cache:
            cache.clear()
            torch.cuda.empty_cache()
            cache[key] = Inputs(torch, B, a.heads, Sq, Sk, a.head_dim, dtype)
        res, cbm = time_mask(torch, ctx, a, typ, Sq, Sk, causal, mb, vec, cache[key])
        for pas in a.passes:
            ms = [res[pas].get(p, float("nan")) for p in ("flex", "flex_flash", "cudnn", "fa4")]
            print("%-22s %6d %3d %-6s %10.3f %10.3f %10.3f %10.3f %10.3f" % (typ, Sk, B, pas, *ms, cbm), flush=True)
            rows.append((typ, Sk, B, ms[0], ms[2], pas, mb, ms[1], ms[3], cbm))
    if a.csv:
        write_csv(a.csv, rows)
    return 0


def write_csv(path, rows):
    with open(path, "w") as f:
        f.write(",".join(CSV_COLUMNS) + "\n")
        for r in rows:
            f.write("%s,%d,%d,%.4f,%.4f,%s,%d,%.4f,%.4f,%.4f\n" % r)


def self_test(a):
    """No GPU, no torch: argument parsing; the HDF5 reading where numpy and h5py are installed."""
    fails = 0

    def check(cond, what):
        nonlocal fails
        print("%s: %s" % ("ok" if cond else "FAIL", what))
        fails += not cond

    d = parse_args(["m.h5"])
    check(d.passes == ["fwd"] and d.peers == list(PEERS) and d.heads == 32 and d.reps == 10 and d.cbm == 1 and d.warmup_s == 0,
          "defaults")
    d = parse_args(["m.h5", "-warmup_s", "2.5"])
    check(d.warmup_s == 2.5, "-warmup_s")
    d = parse_args(["m.h5", "--pass", "fwd,bwd", "-heads", "8", "--head_dim", "64", "-reps", "3", "--peers", "flex,fa4"])
    check(d.passes == ["fwd", "bwd"] and d.heads == 8 and d.head_dim == 64 and d.reps == 3 and d.peers == ["flex", "fa4"],
          "one- and two-dash options, comma lists")
    d = parse_args(["m.h5", "m2.h5", "-pass", "bwd"])
    check(d.maskfiles == ["m.h5", "m2.h5"] and d.passes == ["bwd"], "several mask files")
    d = parse_args(["-pass", "fwdbwd", "m.h5", "-csv", "o.csv"])
    check(d.passes == ["fwdbwd"] and d.maskfiles == ["m.h5"] and d.csv == "o.csv", "options before the file")
    for bad in (["m.h5", "--pass", "backward"], ["m.h5", "--peers", "xformers"], ["m.h5", "-dtype", "fp8"], ["m.h5", "-warmup_s", "-1"], []):
        try:
            with open(os.devnull, "w") as null:
                old, sys.stderr = sys.stderr, null
                try:
                    parse_args(bad)
                finally:
                    sys.stderr = old
            check(False, "refuses %s" % bad)
        except SystemExit as e:
            check(e.code == 2, "refuses %s" % (bad or "no MASKFILE"))
    try:
        import h5py
        import numpy as np
    except ImportError as e:
        print("skip: HDF5 reading (%s)" % e)
        return 1 if fails else 0
    self_test_hdf5(h5py, np, check)
    for path in a.maskfiles:  # a file fmbench wrote: every mask loads with the shapes its attributes give
        n = 0
        for name, typ, sq, sk, causal, mb, vec in load_masks(path):
            n += 1
            ok = all(x.shape[0] == mb and x.shape[2] == sk and x.dtype == np.int32 for x in vec)
            ok = ok and all(((x >= 0) & (x <= sq)).all() for x in vec) and (vec[0] <= vec[1]).all() and (vec[2] <= vec[3]).all()
            check(ok, "%s: %s, mask_batch %d, bounds in [0, %d] and ordered" % (path, name, mb, sq))
            if mb > 1 and typ in ("document", "causal_document", "share_question"):  # every sample packs its own documents
                check(any((x != x[:1]).any() for x in vec), "%s: the %d samples have different bounds" % (name, mb))
        check(n > 0, "%s holds masks" % path)
    return 1 if fails else 0


def self_test_hdf5(h5py, np, check):
    """Write masks in fmbench's layout (mask_batch 1, 3, and a group without the attribute,
    as files from before per-sample masks) and read them back."""
    sk, sq = 10, 12
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.h5")
        lts1 = rng.integers(0, sq, (2, sk)).astype(np.int32)
        lts3 = rng.integers(0, sq, (3, 1, sk)).astype(np.int32)
        with h5py.File(path, "w") as f:
            g = f.create_group("masks/doc_a")
            g.attrs.update(type=np.bytes_("document"), seqlen_q=sq, seqlen_k=sk, causal=1, mask_heads=2, mask_batch=1)
            g["lts"] = lts1
            g = f.create_group("masks/doc_b")
            g.attrs.update(type="document", seqlen_q=sq, seqlen_k=sk, causal=0, mask_heads=1, mask_batch=3)
            g["lts"] = lts3
            g["ute"] = lts3 + 1
            g = f.create_group("masks/old")
            g.attrs.update(type="causal", seqlen_q=sq, seqlen_k=sk, causal=1, mask_heads=1)
        got = {m[0]: m for m in load_masks(path)}
    check(sorted(got) == ["doc_a", "doc_b", "old"], "every group read")
    _, typ, q, k, c, mb, v = got["doc_a"]
    check(typ == "document" and (q, k, c, mb) == (sq, sk, 1, 1) and v[0].shape == (1, 2, sk) and (v[0][0] == lts1).all(),
          "mask_batch 1, 2 heads: [1][2][Sk], type decoded from bytes")
    check((v[1] == sq).all() and (v[2] == 0).all() and (v[3] == 0).all(), "absent vectors in default form (lte = Sq, uts = ute = 0)")
    _, typ, q, k, c, mb, v = got["doc_b"]
    check(mb == 3 and v[0].shape == (3, 1, sk) and (v[0] == lts3).all() and (v[3] == lts3 + 1).all(), "mask_batch 3: [3][1][Sk] per sample")
    check(got["old"][5] == 1 and got["old"][6][0].shape == (1, 1, sk), "a group without mask_batch loads as batch 1")


def main(argv):
    a = parse_args(argv)
    sys.argv = sys.argv[:1]  # the CuTe DSL (FA4) parses sys.argv itself when it compiles: give it none of ours
    if a.self_test:
        return self_test(a)
    return run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
