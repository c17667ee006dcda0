#!/usr/bin/env python3
"""vtensor (cuda backend, policy none) against PyTorch eager, fp32, same models, shapes and batch.

For each model: runs `vtensor train --backend cuda --policy none` with a JSON report, then the same
model in PyTorch eager in this process, and writes one row per model with the median iteration
time and the peak allocated / reserved device memory of each, and their ratios (vtensor / PyTorch).

Both sides are strict fp32: TF32 off in cuBLAS and cuDNN (vtensor sets CUDNN_FMA_MATH and cuBLAS
default math), cudnn.benchmark off (vtensor takes cuDNN's heuristic choice too), SGD with momentum
0.9. The models mirror vtensor/models (zoo.cpp, transformer.cpp): torchvision-style ResNet-50 v1.5
(stride in the 3x3 conv), VGG-16 without batch norm (dropout 0.5 in the classifier), GPT-2 small
with pre-LN blocks, separate q/k/v projections, attention as matmul -> causal softmax -> matmul (no
fused kernel, as in vtensor), tanh GELU, no dropout, LM head tied to the token embedding. Data:
PyTorch trains on one fixed random batch already on the device; vtensor generates its synthetic
batch on the device in every iteration (a few microseconds of its time).

Usage (on the GPU machine, from the repository root, after building with CUDA):
  python3 bench/cuda_vs_pytorch.py --vtensor build/vtensor --out bench-out/cuda_vs_pytorch
  python3 bench/cuda_vs_pytorch.py --models resnet50 --batch resnet50=64 --iters 20
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time

DEFAULT_BATCH = {"resnet50": 32, "vgg16": 64, "gpt2-small": 8}
DEFAULT_SEQ = {"gpt2-small": 1024}


def run_vtensor(binary, model, batch, iters, warmup, out_dir, deterministic):
    report = os.path.join(out_dir, f"vtensor_{model}_b{batch}.json")
    cmd = [binary, "train", "--model", model, "--batch", str(batch), "--backend", "cuda", "--policy", "none",
           "--iters", str(iters + warmup), "--report", report, "--quiet"]
    if deterministic:
        cmd.append("--deterministic")
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(report) as f:
        r = json.load(f)
    its = r["iterations"][warmup:]
    return {
        "cmd": " ".join(cmd),
        "iter_ms": statistics.median(i["time_ms"] for i in its),
        "peak_allocated": max(i["peak_allocated_bytes"] for i in r["iterations"]),
        "peak_reserved": max(i["peak_reserved_bytes"] for i in r["iterations"]),
        "first_loss": r["iterations"][0]["loss"],
        "device": r["device"],
    }


def torch_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Bottleneck(nn.Module):
        def __init__(self, cin, ch, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, ch, 1, bias=False), nn.BatchNorm2d(ch)
            self.c2, self.b2 = nn.Conv2d(ch, ch, 3, stride, 1, bias=False), nn.BatchNorm2d(ch)
            self.c3, self.b3 = nn.Conv2d(ch, ch * 4, 1, bias=False), nn.BatchNorm2d(ch * 4)
            self.short = None
            if stride != 1 or cin != ch * 4:
                self.short = nn.Sequential(nn.Conv2d(cin, ch * 4, 1, stride, bias=False), nn.BatchNorm2d(ch * 4))

        def forward(self, x):
            s = x if self.short is None else self.short(x)
            y = F.relu(self.b1(self.c1(x)))
            y = F.relu(self.b2(self.c2(y)))
            y = self.b3(self.c3(y))
            return F.relu(y + s)

    class ResNet50(nn.Module):
        def __init__(self, width=64, classes=1000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], width
            for s, depth in enumerate([3, 4, 6, 3]):
                ch = width << s
                for b in range(depth):
                    blocks.append(Bottleneck(cin, ch, 2 if s > 0 and b == 0 else 1))
                    cin = ch * 4
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

    class VGG16(nn.Module):
        def __init__(self, classes=1000, image=224):
            super().__init__()
            layers, cin = [], 3
            for m in [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]:
                if m == 0:
                    layers.append(nn.MaxPool2d(2, 2))
                    image //= 2
                else:
                    layers += [nn.Conv2d(cin, m, 3, 1, 1), nn.ReLU()]
                    cin = m
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Linear(cin * image * image, 4096), nn.ReLU(), nn.Dropout(0.5),
                                            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4096, classes))

        def forward(self, x):
            return self.classifier(torch.flatten(self.features(x), 1))

    class Block(nn.Module):
        def __init__(self, c, heads):
            super().__init__()
            self.h = heads
            self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.q, self.k, self.v, self.o = (nn.Linear(c, c) for _ in range(4))
            self.fc, self.proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def attn(self, x):
            B, T, C = x.shape
            D = C // self.h
            q, k, v = (t.view(B, T, self.h, D).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x)))
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
            return self.o((p @ v).transpose(1, 2).reshape(B, T, C))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, layers=12, heads=12, c=768, vocab=50257, n_ctx=1024, seq=1024):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(max(n_ctx, seq), c)
            self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(c)

        def forward(self, idx):
            T = idx.shape[1]
            h = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                h = b(h)
            return self.ln(h) @ self.wte.weight.t()

    return {"resnet50": ResNet50, "vgg16": VGG16, "gpt2-small": GPT2}


def run_pytorch(model, batch, iters, warmup, seq):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    torch.manual_seed(0)
    net = torch_models()[model]().to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05 if model != "gpt2-small" else 0.01, momentum=0.9)
    if model == "gpt2-small":
        x = torch.randint(1, 50257, (batch, seq), device=dev)
        y = torch.randint(1, 50257, (batch * seq,), device=dev)
    else:
        x = torch.randn(batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = net(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y)
        loss.backward()
        opt.step()
        loss.item()  # vtensor reads its loss every iteration too
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    r = {"iter_ms": statistics.median(times), "peak_allocated": torch.cuda.max_memory_allocated(),
         "peak_reserved": torch.cuda.max_memory_reserved(), "torch": torch.__version__,
         "device": torch.cuda.get_device_name()}
    del net, opt, x, y
    torch.cuda.empty_cache()
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vtensor", default="build/vtensor")
    ap.add_argument("--models", default="resnet50,vgg16,gpt2-small")
    ap.add_argument("--batch", action="append", default=[], help="model=batch (default: the model's preset)")
    ap.add_argument("--iters", type=int, default=10, help="timed iterations")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--deterministic", action="store_true", help="vtensor: deterministic cuDNN algorithms")
    ap.add_argument("--out", default="bench-out/cuda_vs_pytorch", help="output prefix (.csv and .json)")
    a = ap.parse_args()
    batches = dict(DEFAULT_BATCH)
    for b in a.batch:
        k, _, v = b.partition("=")
        if k not in DEFAULT_BATCH or not v.isdigit():
            sys.exit(f"--batch {b}: expected model=batch with model one of {', '.join(DEFAULT_BATCH)}")
        batches[k] = int(v)
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("PyTorch is not installed here: this benchmark needs torch (2.11) on the GPU machine")
    out_dir = os.path.dirname(a.out) or "."
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for m in a.models.split(","):
        if m not in DEFAULT_BATCH:
            sys.exit(f"--models: unknown model {m}; accepted: {', '.join(DEFAULT_BATCH)}")
        v = run_vtensor(a.vtensor, m, batches[m], a.iters, a.warmup, out_dir, a.deterministic)
        p = run_pytorch(m, batches[m], a.iters, a.warmup, DEFAULT_SEQ.get(m, 0))
        row = {"model": m, "batch": batches[m],
               "vtensor_ms": round(v["iter_ms"], 3), "pytorch_ms": round(p["iter_ms"], 3),
               "time_ratio": round(v["iter_ms"] / p["iter_ms"], 4),
               "vtensor_peak_alloc_mib": round(v["peak_allocated"] / 2**20, 1),
               "pytorch_peak_alloc_mib": round(p["peak_allocated"] / 2**20, 1),
               "peak_alloc_ratio": round(v["peak_allocated"] / p["peak_allocated"], 4),
               "vtensor_peak_reserved_mib": round(v["peak_reserved"] / 2**20, 1),
               "pytorch_peak_reserved_mib": round(p["peak_reserved"] / 2**20, 1),
               "device": p["device"], "torch": p["torch"], "vtensor_cmd": v["cmd"]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    with open(a.out + ".json", "w") as f:
        json.dump(rows, f, indent=2)
    with open(a.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out}.csv and {a.out}.json")


if __name__ == "__main__":
    main()
