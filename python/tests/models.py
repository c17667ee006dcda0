"""Small models written for the tests: a CNN of conv blocks and a transformer (causal attention)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


def small_cnn(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(block(3, 16), block(16, 16), block(16, 16), nn.MaxPool2d(2), block(16, 32), block(32, 32),
                         nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 8 * 8, 10))


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        a = a.masked_fill(mask, float("-inf")).softmax(-1)
        return self.out((a @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=4, seq=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def small_gpt(seed=0):
    torch.manual_seed(seed)
    return TinyGPT()


def cnn_batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)


def gpt_batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 64, (4, 17), generator=g)
    return idx[:, :-1], idx[:, 1:]


def loss_of(model, x, y):
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def train_step(model, x, y, seed=123):
    """Loss and gradients of one step (dropout seeded, so two calls see the same mask)."""
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    loss = loss_of(model, x, y)
    loss.backward()
    return loss.detach().clone(), [p.grad.clone() for p in model.parameters()]


def assert_identical(a, b):
    assert torch.equal(a[0], b[0]), f"loss differs: {a[0].item()!r} vs {b[0].item()!r}"
    assert len(a[1]) == len(b[1])
    for i, (ga, gb) in enumerate(zip(a[1], b[1])):
        assert torch.equal(ga, gb), f"gradient {i} differs (max abs diff {(ga - gb).abs().max().item()})"
