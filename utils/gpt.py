"""What chapter 18's scripts share: a small GPT, its text, its batches, its recipe, its FLOPs.

- The text: ``make_corpus()`` writes English-like lines from a small grammar with a fixed seed
  (no download: the same characters on every machine); ``make_answers_corpus()`` writes
  prompt/answer pairs whose prompts are not trained on (``--loss-on answers``);
  ``read_text()`` reads ``--text-file``. ``build_corpus()`` encodes a text one character per
  token and splits it as nanoGPT does: the first 90% trains, the last 10% is held out.
- ``Batches``: the training sequences of each optimizer step, on the device. Packed (the
  default, as nanoGPT and torchtitan train): windows of ``block_size + 1`` tokens cut from the
  token stream, every position a real token. Padded (``--batching padded``): each line or
  paragraph one document, right-padded with a pad token whose target is ``IGNORE``. The
  order is drawn per epoch from the seed alone, so every world size trains on the same global
  batches, and ``state_dict()`` holds the data position a resume restores.
- ``held_out_windows()``: the held-out text in windows of one block, each token once.
- ``GPT``: token and position embeddings, pre-norm blocks of causal self-attention
  (``F.scaled_dot_product_attention(is_causal=True)``) and an MLP, a final LayerNorm and an
  output head tied to the token embedding; no biases, dropout where GPT-2 has it.
- The recipe: ``make_optimizer()`` (AdamW, fused on CUDA, weight decay on 2-D weights
  only), ``make_scheduler()`` (linear warm-up, then cosine decay to ``--min-lr``).
- ``flops_per_token()``, ``peak_tflops()`` and ``ceiling_tokens_per_s()``: MFU on real tokens,
  and the step's own ceiling, measured by a loop of its own (no DDP, no data loading).
- ``saved_activation_bytes()``: the bytes autograd keeps for backward in one forward.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from utils.cli import existing_file, fraction, non_negative_int, positive_float, positive_int, usage_error
from utils.timing import synchronized_clock

IGNORE = -100  # F.cross_entropy's default ignore_index: the target of a pad or of a prompt
HELD_OUT = 0.1  # the last tenth of the text, as nanoGPT's data/shakespeare_char/prepare.py splits it

# --------------------------------------------------------------------------- the text
_WORDS = {
    "det": ["the", "a", "every", "one", "this"],
    "adj": ["small", "old", "quiet", "bright", "lazy", "brave", "tired", "green"],
    "noun": ["cat", "dog", "bird", "farmer", "child", "river", "king", "baker", "fox", "ship"],
    "verb": ["sees", "finds", "follows", "likes", "hears", "carries", "watches", "helps"],
    "adv": ["slowly", "today", "again", "at night", "in the rain", "by the sea"],
}
# The passive of each verb, for the answers of make_answers_corpus().
_PARTICIPLE = {"sees": "seen", "finds": "found", "follows": "followed", "likes": "liked",
               "hears": "heard", "carries": "carried", "watches": "watched", "helps": "helped"}


def _phrase(rng: random.Random) -> str:
    words = [rng.choice(_WORDS["det"])]
    if rng.random() < 0.5:
        words.append(rng.choice(_WORDS["adj"]))
    words.append(rng.choice(_WORDS["noun"]))
    return " ".join(words)


def _sentence(rng: random.Random) -> str:
    text = f"{_phrase(rng)} {rng.choice(_WORDS['verb'])} {_phrase(rng)}"
    if rng.random() < 0.4:
        text += f" {rng.choice(_WORDS['adv'])}"
    if rng.random() < 0.2:
        text += f" and {rng.choice(_WORDS['verb'])} {_phrase(rng)}"
    return text[0].upper() + text[1:] + "."


def make_corpus(seed: int = 0, documents: int = 3000) -> str:
    """English-like lines of one to four sentences from a small grammar: deterministic
    (Python's random.Random with a fixed seed), learnable, of different lengths."""
    rng = random.Random(seed)
    return "".join(" ".join(_sentence(rng) for _ in range(rng.randint(1, 4))) + "\n"
                   for _ in range(documents))


def make_answers_corpus(seed: int = 0, pairs: int = 3000) -> tuple[str, list[bool]]:
    """Prompt/answer pairs, as in instruction tuning: the prompt states one to three facts,
    the answer puts the first in the passive ("Q: The fox sees a ship. ..." then "A: A ship
    is seen by the fox."). Returns the text and, per character, whether it is trained on:
    the answers only. Pairs are paragraphs (a blank line between two)."""
    rng = random.Random(seed)
    text, trained = [], []
    for _ in range(pairs):
        subject, verb, obj = _phrase(rng), rng.choice(_WORDS["verb"]), _phrase(rng)
        adverb = f" {rng.choice(_WORDS['adv'])}" if rng.random() < 0.4 else ""
        facts = [f"{subject} {verb} {obj}{adverb}."] + [
            _sentence(rng) for _ in range(rng.randint(0, 2))]
        prompt = "Q: " + " ".join(f[0].upper() + f[1:] for f in facts) + " Passive?\nA: "
        answer = f"{obj[0].upper() + obj[1:]} is {_PARTICIPLE[verb]} by {subject}{adverb}.\n\n"
        text += [prompt, answer]
        trained += [False] * len(prompt) + [True] * len(answer)
    return "".join(text), trained


def read_text(path: Path, parser: argparse.ArgumentParser | None = None) -> str:
    """The text of --text-file, or a usage error that says what would work."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        usage_error(f"argument --text-file: {path} cannot be read as UTF-8 text ({error}): "
                    "give a plain text file", parser)
    return text


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class Corpus:
    """A text as one stream of token ids (one per character), split at `split`."""

    text: str
    chars: list[str]
    tokens: torch.Tensor  # [N] int64: the whole text
    trained: torch.Tensor | None  # [N] bool: trained on as a target (None: every character)
    split: int  # tokens[:split] train, tokens[split:] is held out

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def pad(self) -> int:
        """The pad token of --batching padded: one id past the characters, never a target."""
        return len(self.chars)

    @property
    def uniform_loss(self) -> float:
        """The loss of a uniform guess over the characters: ln(vocab_size)."""
        return math.log(self.vocab_size)


def build_corpus(text: str, trained: list[bool] | None = None) -> Corpus:
    """Encode `text` one character per token (the vocabulary: its sorted characters) and
    split it: the first 90% trains, the last 10% is held out (nanoGPT's split)."""
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([index[c] for c in text], dtype=torch.long)
    mask = torch.tensor(trained, dtype=torch.bool) if trained is not None else None
    return Corpus(text, chars, tokens, mask, int(len(text) * (1 - HELD_OUT)))


def _targets(tokens: torch.Tensor, trained: torch.Tensor | None) -> torch.Tensor:
    """`tokens` as targets: IGNORE where a token is not trained on (a prompt's)."""
    return tokens if trained is None else torch.where(trained, tokens, IGNORE)


def documents(corpus: Corpus, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training text as documents, for --batching padded: its paragraphs if it has blank
    lines, else its lines; a piece longer than block_size + 1 characters is cut. Each row is
    right-padded with the pad token, whose target is IGNORE: inputs [D, T], targets [D, T]."""
    train = corpus.text[:corpus.split]
    separator = "\n\n" if "\n\n" in train else "\n"
    starts, start = [], 0
    for piece in train.split(separator):
        end = start + len(piece) + len(separator)  # the separator ends the document
        starts += [(s, min(s + block_size + 1, end, corpus.split)) for s in range(start, end, block_size + 1)]
        start = end
    spans = [(s, e) for s, e in starts if e - s >= 2 and train[s:e].strip()]  # a target, and not blank
    inputs = torch.full((len(spans), block_size), corpus.pad, dtype=torch.long)
    targets = torch.full((len(spans), block_size), IGNORE, dtype=torch.long)
    for row, (s, e) in enumerate(spans):
        inputs[row, :e - s - 1] = corpus.tokens[s:e - 1]
        trained = corpus.trained[s + 1:e] if corpus.trained is not None else None
        targets[row, :e - s - 1] = _targets(corpus.tokens[s + 1:e], trained)
    return inputs, targets


# --8<-- [start:packed]
def windows(tokens: torch.Tensor, starts: torch.Tensor, block_size: int,
            trained: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed sequences: the window of block_size + 1 tokens at each start; the inputs are
    its first block_size tokens, the targets the same shifted by one. Every position is a
    real token. An index on the device, no copy from the host."""
    index = starts[:, None] + torch.arange(block_size + 1, device=starts.device)
    window = tokens[index]
    targets = _targets(window[:, 1:], None if trained is None else trained[index[:, 1:]])
    return window[:, :-1], targets
# --8<-- [end:packed]


DEVICE_SHARE = 0.25  # the training stream stays on a GPU if it takes at most this share of its free memory


def fits_on_device(nbytes: int, device: torch.device) -> bool:
    """Whether a tensor of `nbytes` should live on `device`: always on a CPU (the same memory);
    on a GPU, if it takes at most DEVICE_SHARE of the memory free now (the model, its
    gradients, the optimizer and the activations need the rest)."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return nbytes <= DEVICE_SHARE * free


class Batches:
    """The global batch of each optimizer step, drawn per epoch from the seed alone (the same
    at every world size), on the device. `position` counts the global batches taken: the
    data position that a checkpoint saves and a resume restores.

    Packed, the training stream lives on the device where it fits (`fits_on_device`): windows
    are cut there, with no copy from the host. Where it does not, it stays in host memory
    (pinned on a GPU machine): each step's windows are cut on the host and copied to the
    device without blocking it (`on_host`)."""

    def __init__(self, corpus: Corpus, batching: str, block_size: int, global_batch_size: int,
                 seed: int, device: torch.device) -> None:
        self.packed, self.block_size, self.size = batching == "packed", block_size, global_batch_size
        self.seed, self.device, self.position, self._epoch, self._order = seed, device, 0, -1, None
        self.pad = corpus.pad
        if self.packed:  # the training stream, on the device where it fits: windows are cut there
            tokens = corpus.tokens[:corpus.split]
            trained = corpus.trained[:corpus.split] if corpus.trained is not None else None
            stream_bytes = tokens.nbytes + (trained.nbytes if trained is not None else 0)
            self.on_host = not fits_on_device(stream_bytes, device)
            home = torch.device("cpu") if self.on_host else device  # gpu-checked: the host on purpose
            self.tokens, self.trained = (None if t is None else _pinned(t, device) if self.on_host
                                         else t.to(device) for t in (tokens, trained))
            # Windows per epoch: the same for every offset of the grid (below).
            self.samples = (corpus.split - block_size) // block_size
        else:  # the padded documents live on the device
            self.on_host, home = False, device
            self.inputs, self.targets = (t.to(device) for t in documents(corpus, block_size))
            self.samples = len(self.inputs)
        self.home = home  # where the sample order lives and the windows are cut
        self.per_epoch = self.samples // global_batch_size  # global batches per epoch

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]

    def where(self) -> str:
        epoch, batch = divmod(self.position, self.per_epoch)
        return f"global batch {self.position} (epoch {epoch}, batch {batch} of {self.per_epoch})"

    def _epoch_order(self, epoch: int) -> torch.Tensor:
        """Epoch `epoch`'s samples in order: packed, the windows of a grid shifted by an offset
        drawn per epoch (every token a target once an epoch, at a new place in its window);
        padded, the documents. A CPU generator (the same draw on every device), one copy."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(self.samples, generator=generator)[:self.per_epoch * self.size]
        if self.packed:
            offset = int(torch.randint(self.block_size, (1,), generator=generator))
            order = offset + order * self.block_size
        return _to(order, self.home)

    def peek(self) -> torch.Tensor:
        """The samples of the next global batch (without taking it)."""
        epoch, batch = divmod(self.position, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, self._epoch_order(epoch)
        return self._order[batch * self.size:(batch + 1) * self.size]

    def next(self) -> torch.Tensor:
        samples = self.peek()
        self.position += 1
        return samples

    def sequences(self, samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) [len(samples), block_size] of these samples, on the device."""
        if self.packed:
            inputs, targets = windows(self.tokens, samples, self.block_size, self.trained)
            return _to(inputs, self.device), _to(targets, self.device)  # no copy when on the device
        return self.inputs[samples], self.targets[samples]

    def micro_batches(self, samples: torch.Tensor, rank: int, world_size: int, micro_batches: int
                      ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Rank r's equal slice of a global batch, cut into `micro_batches` equal pieces."""
        per_rank = len(samples) // world_size
        mine = samples[rank * per_rank:(rank + 1) * per_rank]
        return [self.sequences(piece) for piece in mine.chunk(micro_batches)]


def _pinned(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` in page-locked host memory when `device` is a GPU (a copy from it can run
    without blocking the host), as it is otherwise."""
    return tensor.pin_memory() if device.type == "cuda" else tensor


def _to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`; a copy from the host to a GPU through pinned memory, without
    blocking the host (the step that uses it waits for it on the GPU's stream)."""
    if tensor.device == device:
        return tensor
    return _pinned(tensor, device).to(device, non_blocking=True)


def held_out_windows(corpus: Corpus, block_size: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out text cut into windows of block_size + 1 tokens, one after the other (the
    last token of one is the first of the next): each held-out token a target once. On the
    device where they fit (`fits_on_device`), else in host memory (evaluation copies each batch)."""
    tokens = corpus.tokens[corpus.split:]
    trained = corpus.trained[corpus.split:] if corpus.trained is not None else None
    starts = torch.arange(0, len(tokens) - block_size, block_size)
    window_bytes = tokens.element_size() * len(starts) * (block_size + 1)
    home = device if fits_on_device(window_bytes, device) else torch.device("cpu")  # gpu-checked: the host
    return windows(tokens.to(home), starts.to(home), block_size,
                   None if trained is None else trained.to(home))


# --------------------------------------------------------------------------- the model
class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.residual_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        q, k, v = (t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        # --8<-- [start:attention]
        # is_causal: position t attends to positions <= t only. Padding sits on the right,
        # so no real token ever attends to a pad: no other mask is needed.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        # --8<-- [end:attention]
        return self.residual_dropout(self.proj(y.transpose(1, 2).reshape(batch, length, dim)))


# --8<-- [start:block]
class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, bias=False)
        self.attn = CausalSelfAttention(dim, heads, dropout)
        self.norm2 = nn.LayerNorm(dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.GELU(),
                                 nn.Linear(4 * dim, dim, bias=False), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))
# --8<-- [end:block]


class GPT(nn.Module):
    """Token + position embeddings, `layers` blocks, a final LayerNorm, a tied head."""

    def __init__(self, vocab_size: int, block_size: int, dim: int, layers: int, heads: int,
                 dropout: float = 0.0, pad: bool = False) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.tokens = nn.Embedding(vocab_size + int(pad), dim)  # + the pad token, if padded
        self.positions = nn.Embedding(block_size, dim)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(dim, bias=False)
        self.activation_checkpointing = False
        for name, p in self.named_parameters():
            if p.dim() == 2:  # GPT-2's initialisation: the layers that write into the
                # residual stream scaled down by the depth, so that it does not grow with it
                residual = name.endswith(("attn.proj.weight", "mlp.2.weight"))
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers) if residual else 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """The logits [batch, length, vocab]; with `targets`, the sum of the cross-entropy over
        the trained tokens instead (pads and prompts, IGNORE, left out). The loss inside the
        forward: a compiled model fuses it with the head (nanoGPT computes it there too)."""
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.dropout(self.tokens(idx) + self.positions(positions))
        for block in self.blocks:
            # Activation checkpointing: keep the block's input only, recompute the rest in backward.
            x = checkpoint(block, x, use_reentrant=False) if self.activation_checkpointing else block(x)
        # The head is tied to the token embedding: one matrix reads and writes characters.
        # Its rows of the characters only: the pad is never predicted.
        logits = F.linear(self.norm(x), self.tokens.weight[:self.vocab_size])
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE,
                               reduction="sum")


def build_model(corpus: Corpus, args: argparse.Namespace, device: torch.device,
                seed: int | None = None) -> GPT:
    """The same initial weights on every rank and in every run with this seed (--seed's)."""
    torch.manual_seed(args.seed if seed is None else seed)
    return GPT(corpus.vocab_size, args.block_size, args.dim, args.layers, args.heads, args.dropout,
               pad=args.batching == "padded").to(device)


def token_loss_sum(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The sum of the cross-entropy over the trained tokens; pads and prompts are ignored.
    `model`: the GPT, or a wrapper of it (DDP, FSDP2, torch.compile) that passes `targets` on."""
    return model(inputs, targets)


def mean_token_loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The loss of one process that holds the whole batch: the mean over its trained tokens."""
    return token_loss_sum(model, inputs, targets) / (targets != IGNORE).sum()


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------- the recipe
# --8<-- [start:recipe]
def make_optimizer(model: nn.Module, args: argparse.Namespace, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on the 2-D weights (matrices, embeddings) only, not on the
    LayerNorms' gains; betas (0.9, 0.99) as nanoGPT's small models; fused on CUDA."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.99), fused=device.type == "cuda")


def make_scheduler(optimizer: torch.optim.Optimizer, args: argparse.Namespace
                   ) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over --warmup-steps, then a cosine decay to --min-lr at --steps."""
    floor = args.min_lr / args.lr

    def factor(done: int) -> float:  # `done`: the optimizer steps before this one
        if done < args.warmup_steps:
            return (done + 1) / (args.warmup_steps + 1)
        progress = min(1.0, (done - args.warmup_steps) / max(1, args.steps - args.warmup_steps))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
# --8<-- [end:recipe]


# --------------------------------------------------------------------------- FLOPs, MFU, ceiling
def flops_per_token(model: GPT, block_size: int) -> float:
    """6 FLOPs per parameter per token (forward 2, backward 4) for the matrix products, the
    position table left out (a lookup), plus the attention scores and their weighted sum:
    12 x layers x dim x block_size (the PaLM paper's appendix B; nanoGPT's estimate_mfu)."""
    dim = model.positions.weight.shape[1]
    params = count_parameters(model) - model.positions.weight.numel()
    return 6 * params + 12 * len(model.blocks) * dim * block_size


# --8<-- [start:peaks]
# Dense bf16 tensor-core peaks, TFLOP/s: half of each data sheet's "with sparsity" figure.
# Keyed by the words of torch.cuda.get_device_name(); the entry with the most words that
# all appear in the name wins ("NVIDIA H100 NVL" is the NVL, not the SXM "H100").
PEAK_BF16_TFLOPS = {
    ("H100",): 989.0,         # NVIDIA H100 data sheet: H100 SXM, BF16 1,979 with sparsity
    ("H100", "PCIe"): 756.0,  # NVIDIA H100 data sheet: H100 PCIe, BF16 1,513 with sparsity
    ("H100", "NVL"): 835.0,   # NVIDIA H100 data sheet: H100 NVL, BF16 1,671 with sparsity
    ("H200",): 989.0,         # NVIDIA H200 data sheet: H200 SXM, BF16 1,979 with sparsity
    ("H200", "NVL"): 835.0,   # NVIDIA H200 data sheet: H200 NVL, BF16 1,671 with sparsity
    ("A100",): 312.0,         # NVIDIA A100 data sheet: BF16 312 (624 with sparsity), SXM and PCIe
}


def peak_for_name(name: str) -> float | None:
    """The table's peak for a GPU named `name`, None for a card it does not know."""
    words = set(re.split(r"[\s\-]+", name))
    known = [key for key in PEAK_BF16_TFLOPS if set(key) <= words]
    return PEAK_BF16_TFLOPS[max(known, key=len)] if known else None
# --8<-- [end:peaks]


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    """--peak-tflops, else the table's entry for this GPU's name; None on a CPU or an
    unknown card."""
    if given is not None:
        return given
    if device.type != "cuda":
        return None
    return peak_for_name(torch.cuda.get_device_name(device))


def ceiling_tokens_per_s(model: GPT, args: argparse.Namespace, sequences: int, device: torch.device,
                         autocast: torch.autocast, steps: int, compile_model: bool = False) -> float:
    """The step alone, written apart from the chapter's loop: a copy of the model (no DDP),
    the recipe's optimizer, `sequences` windows of random tokens already on the device
    (every position real), `steps` timed steps after one warm-up (and compilation). Returns
    real tokens per second on this device."""
    twin = copy.deepcopy(model)
    optimizer = make_optimizer(twin, args, device)
    forward = torch.compile(twin) if compile_model else twin
    inputs = torch.randint(model.vocab_size, (sequences, args.block_size), device=device)
    targets = torch.randint(model.vocab_size, (sequences, args.block_size), device=device)
    start = 0.0
    for step in range(steps + 1):
        if step == 1:
            start = synchronized_clock(device)
        with autocast:
            loss = forward(inputs, targets) / targets.numel()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return sequences * args.block_size * steps / (synchronized_clock(device) - start)


# --------------------------------------------------------------------------- memory
def saved_activation_bytes(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
                           ) -> tuple[int, int]:
    """(bytes, storages) of the tensors autograd keeps for backward during one forward (each
    storage once, parameters left out), as torch.autograd.graph.saved_tensors_hooks sees them."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = token_loss_sum(model, inputs, targets)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(kept.values()), len(kept)


# --------------------------------------------------------------------------- flags
PRESETS = {  # the model's shape and recipe; flags given explicitly win (a size, no device)
    "cpu": dict(block_size=96, dim=64, layers=2, heads=4, global_batch_size=16, lr=3e-3,  # gpu-checked
                warmup_steps=10, dropout=0.0),
    # nanoGPT's config/train_shakespeare_char.py: the same shape, learning rates, warm-up, dropout
    "gpu": dict(block_size=256, dim=384, layers=6, heads=6, global_batch_size=64, lr=1e-3,
                warmup_steps=100, dropout=0.2),
}


def add_gpt_args(parser: argparse.ArgumentParser, *, steps: int) -> argparse.ArgumentParser:
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu",  # gpu-checked
                        help="the model's size and recipe: cpu (about 0.1M parameters, seconds on a "
                        "laptop) or gpu (about 10.7M, nanoGPT's shakespeare-char configuration) "
                        "(default: %(default)s)")
    parser.add_argument("--text-file", type=existing_file, metavar="FILE", default=None,
                        help="train on this UTF-8 text instead of the generated corpus; its last "
                        "10%% is held out")
    parser.add_argument("--batching", choices=["packed", "padded"], default="packed",
                        help="packed: windows of the token stream, every position a real token; "
                        "padded: each line (or paragraph) a document, right-padded (default: %(default)s)")
    parser.add_argument("--loss-on", choices=["all", "answers"], default="all",
                        help="all: every token is a target; answers: a generated corpus of "
                        "prompt/answer pairs, the prompts not trained on (default: %(default)s)")
    parser.add_argument("--steps", type=positive_int, default=steps,
                        help="optimizer steps (default: %(default)s)")
    parser.add_argument("--global-batch-size", type=positive_int, default=None,
                        help="sequences per optimizer step over all ranks, split equally "
                        "(default: the preset's)")
    parser.add_argument("--lr", type=positive_float, default=None,
                        help="AdamW's peak learning rate (default: the preset's)")
    parser.add_argument("--min-lr", type=positive_float, default=None,
                        help="the learning rate at the end of the cosine decay (default: --lr / 10)")
    parser.add_argument("--warmup-steps", type=non_negative_int, default=None,
                        help="steps of linear learning-rate warm-up (default: the preset's)")
    parser.add_argument("--weight-decay", type=positive_float, default=0.1,
                        help="AdamW's weight decay, on the 2-D weights only (default: %(default)s)")
    parser.add_argument("--grad-clip", type=positive_float, default=1.0,
                        help="the largest gradient norm; larger ones are scaled down to it "
                        "(default: %(default)s)")
    parser.add_argument("--dropout", type=fraction, default=None,
                        help="dropout probability, 0 <= p < 1 (default: the preset's)")
    for flag, what in (("--block-size", "characters per sequence"), ("--dim", "model width"),
                       ("--layers", "transformer blocks"), ("--heads", "attention heads")):
        parser.add_argument(flag, type=positive_int, default=None, help=f"{what} (default: the preset's)")
    return parser


def resolve_gpt_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> None:
    """Fill what was not given from --preset; check what must hold together."""
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.min_lr is None:
        args.min_lr = args.lr / 10
    if args.dim % args.heads:
        usage_error(f"--dim {args.dim} does not divide by --heads {args.heads}: pick a width that "
                    "is a multiple of the number of heads", parser)
    if args.loss_on == "answers" and args.text_file is not None:
        usage_error("--loss-on answers trains on a generated corpus of prompt/answer pairs; "
                    "--text-file has no prompts: leave out one of the two", parser)


def load_corpus(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None
                ) -> tuple[Corpus, str]:
    """The corpus of --text-file or the generated one, and a line that names it."""
    trained = None
    if args.text_file is not None:
        text, name = read_text(args.text_file, parser), str(args.text_file)
    elif args.loss_on == "answers":
        text, trained = make_answers_corpus(args.seed)
        name = f"generated prompt/answer pairs (seed {args.seed})"
    else:
        text, name = make_corpus(args.seed), f"generated (grammar, seed {args.seed})"
    corpus = build_corpus(text, trained)
    held_out = len(text) - corpus.split
    if held_out < args.block_size + 1 or corpus.split < args.block_size * (args.global_batch_size + 1):
        where = "argument --text-file: " if args.text_file is not None else "the corpus: "
        usage_error(f"{where}{name} has {len(text)} characters, too few for one global batch of "
                    f"{args.global_batch_size} sequences of {args.block_size} plus a held-out tenth: "
                    "give a longer text, or a smaller --global-batch-size or --block-size", parser)
    about = (f"corpus: {name}, {len(text)} characters, sha256 {sha256(text)}, "
             f"{corpus.split} for training and {held_out} held out, vocab {corpus.vocab_size}, "
             f"uniform loss ln({corpus.vocab_size}) = {corpus.uniform_loss:.4f}")
    return corpus, about
