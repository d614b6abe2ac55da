"""Target-written sequences and the target's features at `target_layer_ids`, the data of a block drafter's recipe.

Two sources: windows of the stdlib pair's training files continued by its target, and a fetched chat model's
answers to the offline chat prompts. Either way the sequences differ in length; a step pads the ones it draws.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import torch

from ..engine.block_training import BlockBatch, padded_blocks
from ..engine.drafters import layer_outputs


def say(msg: str) -> None:
    """One line of progress, flushed at once (recipes run for many minutes)."""
    print(msg, flush=True)


@dataclass
class Sequences:
    """Token sequences, their target features (bfloat16) and, per sequence, the first position an anchor may take
    (the last token the target did not write: its root drafts the first written one)."""

    tokens: list[torch.Tensor]  # (L_i,)
    feats: list[torch.Tensor]  # (L_i, F)
    first: list[int]

    def __len__(self) -> int:
        return len(self.tokens)

    def count(self) -> int:
        """Tokens written by the target."""
        return sum(t.numel() - 1 - f for t, f in zip(self.tokens, self.first))

    def draw(self, idx: list[int], anchors: int, block_size: int, mask_id: int, gen: torch.Generator) -> BlockBatch:
        """A padded batch of sequences `idx`, with `anchors` random blocks in each one's target-written part."""
        rows = []
        for i in idx:
            span = self.tokens[i].numel() - block_size - self.first[i] + 1  # anchors whose labels are all written
            pick = torch.randperm(span, generator=gen)[:anchors] if span >= anchors else \
                torch.randint(0, max(span, 1), (anchors,), generator=gen)
            rows.append(pick + self.first[i])
        return padded_blocks([self.tokens[i] for i in idx], [self.feats[i].float() for i in idx], torch.stack(rows),
                             block_size, mask_id)


def rarest_id(seqs: Sequences, vocab: int, keep: set[int]) -> int:
    """The mask token: an id the training text never holds (the highest on ties), never one of `keep`."""
    counts = torch.bincount(torch.cat(seqs.tokens), minlength=vocab)[:vocab]
    for k in keep:
        counts[k] = counts.max() + 1
    return vocab - 1 - int(torch.argmin(counts.flip(0)))


@torch.inference_mode()
def features_of(target, seqs: list[torch.Tensor], layer_ids: list[int], batch: int) -> list[torch.Tensor]:
    """Each sequence's target features (L_i, F), bfloat16, from right-padded batches of similar lengths."""
    out: list[torch.Tensor | None] = [None] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda j: seqs[j].numel())
    for s in range(0, len(order), batch):
        chunk = order[s : s + batch]
        width = max(seqs[j].numel() for j in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for r, j in enumerate(chunk):
            ids[r, : seqs[j].numel()], mask[r, : seqs[j].numel()] = seqs[j], 1
        hs = target(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        feats = layer_outputs(hs, layer_ids).to(torch.bfloat16)
        for r, j in enumerate(chunk):
            out[j] = feats[r, : seqs[j].numel()].clone()
    return out  # type: ignore[return-value]


def windows(stream: torch.Tensor, n: int, length: int, rng: random.Random) -> torch.Tensor:
    """(n, length) random windows of a token stream."""
    starts = [rng.randrange(0, stream.numel() - length) for _ in range(n)]
    return torch.stack([stream[s : s + length] for s in starts])


@torch.inference_mode()
def continue_windows(target, contexts: torch.Tensor, new_tokens: int, sample: bool, batch: int) -> torch.Tensor:
    """(n, C + new_tokens): each context continued by the target, greedy or sampled at T = 1 (EOS not special)."""
    out = []
    for i in range(0, contexts.shape[0], batch):
        ids = contexts[i : i + batch]
        kw = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
        gen = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, pad_token_id=0, eos_token_id=None, **kw)
        out.append(gen[:, : ids.shape[1] + new_tokens])
        say(f"  {'sampled' if sample else 'greedy'} continuations: {min(i + batch, contexts.shape[0])}"
            f"/{contexts.shape[0]}")
    return torch.cat(out)


def stdlib_data(args, target, tok, rng: random.Random) -> dict[str, Sequences]:
    """The stdlib pair's data: training-file windows continued half greedily, half at T = 1; held-out files greedy."""
    from .demo_pair import encode_corpus, stdlib_files

    train_files, held_files = stdlib_files()
    rng.shuffle(train_files)
    t0 = time.perf_counter()
    data = {}
    for name, files, n in (("train", train_files[: args.files], args.seqs), ("held", held_files, args.eval_seqs)):
        ctx = windows(encode_corpus(tok, files), n, args.context, rng)
        half = n // 2 if name == "train" else 0  # held-out: greedy only (T = 0 acceptance)
        greedy = continue_windows(target, ctx[half:], args.new_tokens, False, args.gen_batch)
        sampled = continue_windows(target, ctx[:half], args.new_tokens, True, args.gen_batch) if half else greedy[:0]
        seqs = list(torch.cat([sampled, greedy]))
        data[name] = Sequences(seqs, features_of(target, seqs, args.layer_ids, args.gen_batch),
                               [args.context - 1] * len(seqs))
        say(f"{name}: {len(seqs)} sequences of {seqs[0].numel()} tokens ({time.perf_counter() - t0:.0f} s)")
    return data


def chat_data(args, target, tok, rng: random.Random) -> dict[str, Sequences]:
    """A chat pair's data: the target's answers to training chat prompts (half greedy, half at T = 1) and greedy
    answers to held-out ones, each sequence the templated prompt and its answer (cut after EOS)."""
    from .chat_prompts import make_chat_prompts
    from .drafter import generate_examples

    rows = make_chat_prompts(seed=args.seed)
    prompts = {s: [r["prompt"] for r in rows if r["split"] == s] for s in ("train", "eval")}
    for p in prompts.values():
        rng.shuffle(p)
    t0 = time.perf_counter()
    data = {}
    for name, pool, n in (("train", prompts["train"], args.seqs), ("held", prompts["eval"], args.eval_seqs)):
        pool = [pool[i % len(pool)] for i in range(n)]
        half = n // 2 if name == "train" else 0
        examples = generate_examples(target, tok, pool[half:], False, args.new_tokens, args.gen_batch, 1, args.seed)
        if half:
            examples += generate_examples(target, tok, pool[:half], True, args.new_tokens, args.gen_batch, 1,
                                          args.seed + 1)
        examples = [e for e in examples if len(e["answer"]) >= args.block_size]
        seqs = [torch.tensor(e["prompt"] + e["answer"]) for e in examples]
        data[name] = Sequences(seqs, features_of(target, seqs, args.layer_ids, args.gen_batch),
                               [len(e["prompt"]) - 1 for e in examples])
        say(f"{name}: {len(seqs)} answers, {data[name].count()} written tokens ({time.perf_counter() - t0:.0f} s)")
    return data
