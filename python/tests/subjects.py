"""Test subjects no one here wrote: Hugging Face transformers models built from small configs with
use_cache=False (a KV cache filled in forward is filled again by any recomputation, as with HF's own
gradient checkpointing),
random initialisation (nothing is downloaded) and torchvision's resnet18, plus the loop that trains
them: AdamW, gradient accumulation, bf16 autocast where asked, every random draw seeded, so that two
runs with the same seed can be compared bit for bit."""
import contextlib

import torch
import torch.nn.functional as F

VOCAB, SEQ, BATCH = 96, 16, 2


def _quiet_transformers():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def gpt2(seed=0):
    tr = _quiet_transformers()
    torch.manual_seed(seed)
    cfg = tr.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2, n_head=4, use_cache=False)
    return tr.GPT2LMHeadModel(cfg)


def llama(seed=0):
    tr = _quiet_transformers()
    torch.manual_seed(seed)
    cfg = tr.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=SEQ,
                         use_cache=False)
    return tr.LlamaForCausalLM(cfg)


def bert(seed=0):
    tr = _quiet_transformers()
    torch.manual_seed(seed)
    cfg = tr.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=SEQ)
    return tr.BertForMaskedLM(cfg)


def resnet18(seed=0):
    import torchvision
    torch.manual_seed(seed)
    return torchvision.models.resnet18(num_classes=10)


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert, "resnet18": resnet18}


def batch(name, step, size=BATCH, image=32):
    """(inputs tuple, loss_fn(output)) of micro-batch `step`, of `size` samples (resnet18: images of
    `image` x `image` pixels)."""
    g = torch.Generator().manual_seed(100 + step)
    if name == "resnet18":
        x = torch.randn(size, 3, image, image, generator=g)
        y = torch.randint(0, 10, (size,), generator=g)
        return (x,), lambda out: F.cross_entropy(out.float(), y)
    ids = torch.randint(0, VOCAB, (size, SEQ), generator=g)
    labels = ids.clone()
    if name == "bert":
        labels[torch.rand(ids.shape, generator=g) > 0.3] = -100  # masked-LM: a few positions carry the loss

    def loss_fn(out):
        logits = out.logits.float()
        if name != "bert":  # causal LM: predict the next token
            return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1))
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    return (ids,), loss_fn


def train(name, context=None, steps=3, accum=2, autocast=False, model=None, prepare=None, contexts=None,
          batch_size=BATCH, image=32):
    """Train `name` for `steps` optimizer steps of `accum` micro-batches each; `context(step)` gives the
    context each micro-batch's forward and backward run in (None: plain PyTorch), or contexts(model,
    optimizer) gives that function once both exist. prepare(model) is called once before training
    (auto_checkpoint). Returns losses, the last step's gradients, the final parameters."""
    model = model if model is not None else MODELS[name]()
    model.train()
    if prepare is not None:
        prepare(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if contexts is not None:
        context = contexts(model, opt)
    losses, grads = [], []
    k = 0
    for step in range(steps):
        for micro in range(accum):
            inputs, loss_fn = batch(name, step * accum + micro, batch_size, image)
            torch.manual_seed(1000 + k)  # dropout masks
            ctx = context(k) if context is not None else contextlib.nullcontext()
            with ctx:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = loss_fn(model(*inputs)) / accum
                loss.backward()
            losses.append(loss.detach().clone())
            k += 1
        grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, grads, [p.detach().clone() for p in model.parameters()]


def assert_identical(ref, got, what=""):
    (l0, g0, p0), (l1, g1, p1) = ref, got
    assert len(l0) == len(l1)
    for i, (a, b) in enumerate(zip(l0, l1)):
        assert torch.equal(a, b), f"{what}: loss {i} differs: {a.item()!r} vs {b.item()!r}"
    assert len(g0) == len(g1), f"{what}: {len(g0)} gradients vs {len(g1)}"
    for i, (a, b) in enumerate(zip(g0, g1)):
        assert torch.equal(a, b), f"{what}: gradient {i} differs (max abs diff {(a - b).abs().max().item()})"
    for i, (a, b) in enumerate(zip(p0, p1)):
        assert torch.equal(a, b), f"{what}: parameter {i} differs after training"
