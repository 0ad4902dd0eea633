#!/usr/bin/env python3
"""faketorch.py DIR - write a stand-in for the few torch pieces share/bench/peers_cp.py uses into
DIR/torch (for tests/test_bench_scripts.sh, where torch is absent): tensors are shapes only,
context_parallel divides the sequence dimension by the ranks (WORLD_SIZE) and checks the 2P
split of the head-tail balancer, SDPA checks is_causal and that fewer KV heads come with
enable_gqa. With FAKE_NO_GQA=1 enable_gqa raises RuntimeError (as a backend refusing it).
Every call is appended to DIR/calls.log."""
import os
import sys

FILES = {
    "__init__.py": '''
import contextlib, os
__version__ = "0.fake"
bfloat16, float64 = "bf16", "f64"
def log(what):
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "calls.log"), "a") as f:
        f.write(what + "\\n")
class device:
    def __init__(self, kind, index=0): self.kind, self.index = kind, index
class Generator:
    def __init__(self, device=None): pass
    def manual_seed(self, s): return self
class Tensor:
    def __init__(self, shape, val=0.0): self.shape, self.val, self.grad, self.requires_grad = list(shape), val, None, False
    def repeat_interleave(self, r, dim): s = list(self.shape); s[dim] *= r; return Tensor(s)
    def contiguous(self): return self
    def requires_grad_(self, b=True): self.requires_grad = b; return self
    def sum(self): return self
    def backward(self, g=None): log("backward")
    def item(self): return self.val
def randn(*shape, **kw): return Tensor(shape)
def tensor(v, **kw): return Tensor([len(v)], v[0])
def no_grad(): return contextlib.nullcontext()
from . import cuda, distributed, nn
''',
    "cuda.py": '''
def is_available(): return True
def set_device(i): pass
def synchronize(): pass
def get_device_name(d=None): return "FakeGPU"
''',
    "nn/__init__.py": "from . import functional, attention\n",
    "nn/functional.py": '''
import os, torch
def scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=False):
    if enable_gqa and os.environ.get("FAKE_NO_GQA") == "1":
        raise RuntimeError("no kernel takes enable_gqa")
    assert is_causal and (enable_gqa or k.shape[1] == q.shape[1]), "GQA without enable_gqa"
    torch.log("sdpa q%s k%s gqa=%d" % (q.shape, k.shape, enable_gqa))
    return torch.Tensor(q.shape)
''',
    "nn/attention/__init__.py": '''
import contextlib
class SDPBackend: CUDNN_ATTENTION = "cudnn"
@contextlib.contextmanager
def sdpa_kernel(backends):
    assert backends == ["cudnn"]
    yield
''',
    "distributed/__init__.py": '''
import os
class ReduceOp: MAX = "max"
def init_process_group(backend, device_id=None): assert backend == "nccl"
def get_rank(): return int(os.environ.get("RANK", "0"))
def get_world_size(): return int(os.environ.get("WORLD_SIZE", "1"))
def all_reduce(t, op=None): pass
def destroy_process_group(): pass
from . import device_mesh, tensor
''',
    "distributed/device_mesh.py": "def init_device_mesh(kind, shape): return ('mesh', shape)\n",
    "distributed/tensor/__init__.py": "from . import experimental\n",
    "distributed/tensor/experimental/__init__.py": '''
import contextlib, torch
@contextlib.contextmanager
def context_parallel(mesh, buffers=None, buffer_seq_dims=None, no_restore_buffers=None):
    P = mesh[1][0]
    for b, d in zip(buffers, buffer_seq_dims):
        assert b.shape[d] % (2 * P) == 0, "the head-tail split needs 2P chunks"
        b.shape[d] //= P
    torch.log("context_parallel P=%d" % P)
    yield
''',
    "distributed/tensor/experimental/_context_parallel.py": '''
import torch
def set_rotate_method(m):
    assert m in ("alltoall", "allgather")
    torch.log("rotate " + m)
''',
}

if __name__ == "__main__":
    for p, text in FILES.items():
        path = os.path.join(sys.argv[1], "torch", p)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
