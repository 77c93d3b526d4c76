"""Device memory a PyTorch process holds outside its tensors, step by step (issue 13, Memory).

Prints, after each step, the memory used on the GPU (total - free, the driver's view: CUDA context,
kernel images, library handles and workspaces, the caching allocator's segments) and the caching
allocator's reserved and allocated bytes, so that what the CUDA context and the libraries take is
told apart from what tensors take. Steps: the first tensor (creates the context), a bf16 GEMM
(cuBLAS / cuBLASLt handles and workspace), FlashAttention forward and backward (SDPA), and a
matmul in fp32. Run on a GPU with nothing else on it. Usage: python3 framework_memory.py [JSON_OUT]
"""
import json
import sys

import torch

MiB = 1024.0 ** 2
rows = []


def note(step):
    free, total = torch.cuda.mem_get_info()
    row = {"step": step, "used_bytes": total - free, "total_bytes": total,
           "reserved_bytes": torch.cuda.memory_reserved(),
           "allocated_bytes": torch.cuda.memory_allocated()}
    row["outside_allocator_bytes"] = row["used_bytes"] - row["reserved_bytes"]
    rows.append(row)
    print(f"{step:48s} used {row['used_bytes'] / MiB:9.1f} MiB, reserved "
          f"{row['reserved_bytes'] / MiB:8.1f}, allocated {row['allocated_bytes'] / MiB:8.1f}, "
          f"outside the allocator {row['outside_allocator_bytes'] / MiB:8.1f}")


torch.zeros(1, device="cuda")
torch.cuda.synchronize()
note("first tensor (CUDA context)")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
(a @ a).sum().item()
note("bf16 GEMM 4096^3 (cuBLAS)")
lin = torch.nn.Linear(4096, 4096, device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    lin(torch.randn(8, 4096, device="cuda")).sum().backward()
torch.cuda.synchronize()
note("autocast linear, forward and backward")
q = torch.randn(4, 16, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
torch.cuda.synchronize()
note("SDPA (FlashAttention) forward and backward")
b = torch.randn(4096, 4096, device="cuda")
(b @ b).sum().item()
note("fp32 GEMM 4096^3")
del a, lin, q, b
torch.cuda.empty_cache()
note("tensors freed, cache emptied")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
if len(sys.argv) > 1:
    json.dump({"torch": torch.__version__, "cuda": torch.version.cuda,
               "device": torch.cuda.get_device_name(), "steps": rows},
              open(sys.argv[1], "w"), indent=1)
