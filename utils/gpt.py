"""What chapter 18's scripts share: a small GPT, its text, its batches, its FLOPs.

- ``make_corpus()``: the default text, made here from a small grammar with a fixed seed (no
  download; the same characters on every machine, its sha256 printed); ``read_text()`` for
  ``--text-file``.
- ``Corpus``: the text cut into documents (lines or paragraphs, at most ``block_size + 1``
  characters each), encoded one character per token, right-padded with a pad token whose
  target is ``IGNORE`` (cross_entropy's ignore_index), and split into training and held-out
  documents.
- ``GPT``: token and position embeddings, pre-norm blocks of causal self-attention
  (``F.scaled_dot_product_attention(is_causal=True)``) and an MLP, a final LayerNorm and an
  output head tied to the token embedding.
- ``global_batch()``: the sequences of one optimizer step, the same at every world size;
  each rank takes an equal slice, cut into micro-batches.
- ``flops_per_token()`` and ``peak_tflops()``: the model FLOPs utilisation (MFU) on a GPU.
- ``saved_activation_bytes()``: the bytes autograd keeps for backward in one forward.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from utils.cli import existing_file, positive_float, positive_int, usage_error

IGNORE = -100  # F.cross_entropy's default ignore_index: a padded position's target

# --------------------------------------------------------------------------- the text
_WORDS = {
    "det": ["the", "a", "every", "one", "this"],
    "adj": ["small", "old", "quiet", "bright", "lazy", "brave", "tired", "green"],
    "noun": ["cat", "dog", "bird", "farmer", "child", "river", "king", "baker", "fox", "ship"],
    "verb": ["sees", "finds", "follows", "likes", "hears", "carries", "watches", "helps"],
    "adv": ["slowly", "today", "again", "at night", "in the rain", "by the sea"],
}


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
    """Documents as rows of token ids, right-padded: inputs [D, T], targets [D, T]."""

    chars: list[str]
    inputs: torch.Tensor
    targets: torch.Tensor
    num_train: int  # the first num_train rows are for training, the rest held out

    @property
    def vocab_size(self) -> int:
        """The characters; the pad token (id vocab_size) is never a target."""
        return len(self.chars)

    @property
    def uniform_loss(self) -> float:
        """The loss of a uniform guess over the characters: ln(vocab_size)."""
        return math.log(self.vocab_size)


def build_corpus(text: str, block_size: int, held_out: float = 0.1) -> Corpus:
    """Cut `text` into documents (its lines when they are short, else its paragraphs), each
    piece at most block_size + 1 characters; encode them; pad them on the right."""
    pieces = [p for p in (text.split("\n\n") if "\n\n" in text else text.splitlines(keepends=True))
              if p.strip()]
    documents = [piece[i:i + block_size + 1] for piece in pieces
                 for i in range(0, len(piece), block_size + 1)]
    documents = [d for d in documents if len(d) >= 2]  # a document of 1 character has no target
    chars = sorted(set(text))
    pad = len(chars)
    index = {c: i for i, c in enumerate(chars)}
    inputs = torch.full((len(documents), block_size), pad, dtype=torch.long)
    targets = torch.full((len(documents), block_size), IGNORE, dtype=torch.long)
    for row, document in enumerate(documents):
        ids = torch.tensor([index[c] for c in document], dtype=torch.long)
        inputs[row, :len(ids) - 1] = ids[:-1]
        targets[row, :len(ids) - 1] = ids[1:]
    num_train = len(documents) - max(1, int(held_out * len(documents)))
    return Corpus(chars, inputs, targets, num_train)


def global_batch(corpus: Corpus, step: int, global_batch_size: int, seed: int) -> torch.Tensor:
    """The training documents of optimizer step `step`: a draw fixed by seed and step alone,
    so every world size trains on the same global batches."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randperm(corpus.num_train, generator=generator)[:global_batch_size]


def rank_micro_batches(rows: torch.Tensor, rank: int, world_size: int, micro_batches: int
                       ) -> list[torch.Tensor]:
    """Rank r's equal slice of a global batch, cut into `micro_batches` equal pieces."""
    per_rank = len(rows) // world_size
    mine = rows[rank * per_rank:(rank + 1) * per_rank]
    return list(mine.chunk(micro_batches))


# --------------------------------------------------------------------------- the model
class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).split(dim, dim=2)
        q, k, v = (t.view(batch, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        # --8<-- [start:attention]
        # is_causal: position t attends to positions <= t only. Padding sits on the right,
        # so no real token ever attends to a pad: no other mask is needed.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # --8<-- [end:attention]
        return self.proj(y.transpose(1, 2).reshape(batch, length, dim))


# --8<-- [start:block]
class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + MLP(norm(x))."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))
# --8<-- [end:block]


class GPT(nn.Module):
    """Token + position embeddings, `layers` blocks, a final LayerNorm, a tied head."""

    def __init__(self, vocab_size: int, block_size: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size + 1, dim)  # + the pad token
        self.positions = nn.Embedding(block_size, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size + 1, bias=False)
        self.head.weight = self.tokens.weight  # tied: one matrix reads and writes tokens
        self.activation_checkpointing = False
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        for block in self.blocks:
            # Activation checkpointing: keep the block's input only, recompute the rest in backward.
            x = checkpoint(block, x, use_reentrant=False) if self.activation_checkpointing else block(x)
        return self.head(self.norm(x))


def build_model(corpus: Corpus, args: argparse.Namespace, device: torch.device,
                seed: int | None = None) -> GPT:
    """The same initial weights on every rank and in every run with this seed (--seed's)."""
    torch.manual_seed(args.seed if seed is None else seed)
    return GPT(corpus.vocab_size, args.block_size, args.dim, args.layers, args.heads).to(device)


def token_loss_sum(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The sum of the cross-entropy over the real (non-pad) tokens; pads are ignored."""
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE,
                           reduction="sum")


def count_parameters(model: nn.Module) -> int:
    """Each parameter once (the tied head is the token embedding)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


# --------------------------------------------------------------------------- FLOPs and MFU
def flops_per_token(model: GPT, block_size: int) -> float:
    """6 FLOPs per parameter per token (forward 2, backward 4) for the matrix products, the
    position table left out (a lookup), plus the attention scores and their weighted sum:
    12 x layers x dim x block_size (the PaLM paper's appendix B; nanoGPT's estimate_mfu)."""
    dim = model.positions.weight.shape[1]
    params = count_parameters(model) - model.positions.weight.numel()
    return 6 * params + 12 * len(model.blocks) * dim * block_size


# Dense bf16 tensor-core peaks, TFLOP/s, from NVIDIA's data sheets (no sparsity: half the
# sheets' "with sparsity" figures). The first key found in the card's name wins, so the
# variants come before "H100".
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0, "A100": 312.0}


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    """--peak-tflops, else the table's entry for this GPU's name; None on a CPU or an
    unknown card."""
    if given is not None:
        return given
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)


# --------------------------------------------------------------------------- memory
def saved_activation_bytes(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> int:
    """Bytes of the tensors autograd keeps for backward during one forward (each storage
    once, parameters left out), as torch.autograd.graph.saved_tensors_hooks sees them."""
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
    return sum(kept.values())


# --------------------------------------------------------------------------- flags
PRESETS = {  # the model's shape and the run's length; flags given explicitly win (a size, no device)
    "cpu": dict(block_size=96, dim=64, layers=2, heads=4, global_batch_size=16, lr=3e-3),  # gpu-checked
    "gpu": dict(block_size=256, dim=384, layers=6, heads=6, global_batch_size=64, lr=1e-3),
}


def add_gpt_args(parser: argparse.ArgumentParser, *, steps: int) -> argparse.ArgumentParser:
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu",  # gpu-checked
                        help="the model's size: cpu (about 0.1M parameters, seconds on a laptop) "
                        "or gpu (about 10.7M, nanoGPT's shakespeare-char shape) (default: %(default)s)")
    parser.add_argument("--text-file", type=existing_file, metavar="FILE", default=None,
                        help="train on this UTF-8 text instead of the generated corpus: its "
                        "paragraphs are the documents (its lines, if it has no blank line)")
    parser.add_argument("--steps", type=positive_int, default=steps,
                        help="optimizer steps (default: %(default)s)")
    parser.add_argument("--global-batch-size", type=positive_int, default=None,
                        help="sequences per optimizer step over all ranks, split equally "
                        "(default: the preset's)")
    parser.add_argument("--lr", type=positive_float, default=None,
                        help="AdamW's learning rate (default: the preset's)")
    for flag, what in (("--block-size", "characters per sequence"), ("--dim", "model width"),
                       ("--layers", "transformer blocks"), ("--heads", "attention heads")):
        parser.add_argument(flag, type=positive_int, default=None, help=f"{what} (default: the preset's)")
    return parser


def resolve_gpt_args(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> None:
    """Fill what was not given from --preset; check what must hold together."""
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.dim % args.heads:
        usage_error(f"--dim {args.dim} does not divide by --heads {args.heads}: pick a width that "
                    "is a multiple of the number of heads", parser)


def load_corpus(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None
                ) -> tuple[Corpus, str]:
    """The corpus of --text-file or the generated one, and a line that names it."""
    if args.text_file is None:
        text, name = make_corpus(args.seed), f"generated (grammar, seed {args.seed})"
    else:
        text, name = read_text(args.text_file, parser), str(args.text_file)
    corpus = build_corpus(text, args.block_size)
    held_out = len(corpus.inputs) - corpus.num_train
    if corpus.num_train < args.global_batch_size or held_out < 1:
        where = "argument --text-file: " if args.text_file is not None else "the corpus: "
        usage_error(f"{where}{name} makes {len(corpus.inputs)} documents, fewer than "
                    f"one --global-batch-size ({args.global_batch_size}) plus held-out ones: give a "
                    "longer text or a smaller --global-batch-size", parser)
    about = (f"corpus: {name}, {len(text)} characters, sha256 {sha256(text)}, "
             f"{len(corpus.inputs)} documents ({held_out} held out), vocab {corpus.vocab_size} "
             f"(+ pad), uniform loss ln({corpus.vocab_size}) = {corpus.uniform_loss:.4f}")
    return corpus, about
