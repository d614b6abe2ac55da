"""Target-written sequences and the target's features at `target_layer_ids`, the data of a block drafter's recipe.

Two sources: windows of the stdlib pair's training files continued by its target, and a fetched chat model's
answers to the offline chat prompts. Either way the sequences differ in length; a step pads the ones it draws.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..engine.draft.drafters import layer_outputs
from ..engine.train.block_training import BlockBatch, padded_blocks


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

    @staticmethod
    def join(parts: list[Sequences]) -> Sequences:
        """One set of sequences from several pieces."""
        return Sequences([t for p in parts for t in p.tokens], [f for p in parts for f in p.feats],
                         [i for p in parts for i in p.first])

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


def stdlib_data(args, target, tok, rng: random.Random, store: DataStore | None) -> dict[str, Sequences]:
    """The stdlib pair's data: training-file windows continued half greedily, half at T = 1; held-out files greedy."""
    from .demo_pair import encode_corpus, stdlib_files

    train_files, held_files = stdlib_files()
    rng.shuffle(train_files)
    t0 = time.perf_counter()
    data = {}
    for name, files, n in (("train", train_files[: args.files], args.seqs), ("held", held_files, args.eval_seqs)):
        ctx = windows(encode_corpus(tok, files), n, args.context, rng)

        def make(name=name, ctx=ctx, n=n) -> Sequences:
            half = n // 2 if name == "train" else 0  # held-out: greedy only (T = 0 acceptance)
            greedy = continue_windows(target, ctx[half:], args.new_tokens, False, args.gen_batch)
            sampled = continue_windows(target, ctx[:half], args.new_tokens, True, args.gen_batch) if half \
                else greedy[:0]
            seqs = list(torch.cat([sampled, greedy]))
            return Sequences(seqs, features_of(target, seqs, args.layer_ids, args.gen_batch),
                             [args.context - 1] * len(seqs))

        data[name] = cached(store, name, make)
        say(f"{name}: {len(data[name])} sequences ({time.perf_counter() - t0:.0f} s)")
    return data


def answer_modes(start: int, stop: int, n_prompts: int) -> list[tuple[int, bool]]:
    """(prompt index, sampled) for answers start..stop-1: the first pass over the prompts alternates greedy and
    T = 1, later passes are T = 1 (fresh samples of the law), so every piece of the data holds both."""
    return [(i % n_prompts, i >= n_prompts or i % 2 == 1) for i in range(start, stop)]


def chat_answers(args, target, tok, prompts: list[str], modes: list[bool], seed: int) -> Sequences:
    """The target's answers to `prompts` (greedy or sampled per `modes`), each sequence the templated prompt and
    its answer cut after EOS, with the target's features."""
    from .drafter import generate_examples

    examples = []
    for sampled in (False, True):
        some = [p for p, m in zip(prompts, modes) if m == sampled]
        if some:
            examples += generate_examples(target, tok, some, sampled, args.new_tokens, args.gen_batch, 1, seed)
    examples = [e for e in examples if len(e["answer"]) >= args.block_size]
    seqs = [torch.tensor(e["prompt"] + e["answer"]) for e in examples]
    return Sequences(seqs, features_of(target, seqs, args.layer_ids, args.gen_batch),
                     [len(e["prompt"]) - 1 for e in examples])


def chat_data(args, target, tok, rng: random.Random, store: DataStore | None) -> dict[str, Sequences]:
    """A chat pair's data: the target's answers to training chat prompts and greedy answers to held-out ones,
    written in pieces of `args.piece` answers that `store` keeps (a rerun writes only the missing ones)."""
    from .chat_prompts import make_chat_prompts

    rows = make_chat_prompts(seed=args.seed)
    prompts = {s: [r["prompt"] for r in rows if r["split"] == s] for s in ("train", "eval")}
    for p in prompts.values():
        rng.shuffle(p)
    held_pool = [prompts["eval"][i % len(prompts["eval"])] for i in range(args.eval_seqs)]
    data = {"held": cached(store, "held", lambda: chat_answers(args, target, tok, held_pool,
                                                               [False] * len(held_pool), args.seed))}
    pieces, pool = [], prompts["train"]
    for k, start in enumerate(range(0, args.seqs, args.piece)):
        modes = answer_modes(start, min(start + args.piece, args.seqs), len(pool))
        name = f"train-{start:06d}-{len(modes)}"
        if store is not None:  # a shorter last piece of an earlier, smaller run is superseded by this one
            store.drop(f"train-{start:06d}-*", keep=name)
        pieces.append(cached(store, name, lambda modes=modes, k=k: chat_answers(
            args, target, tok, [pool[j] for j, _ in modes], [m for _, m in modes], args.seed + 1 + k)))
        say(f"train: {sum(len(x) for x in pieces)} answers, {sum(x.count() for x in pieces)} written tokens")
    data["train"] = Sequences.join(pieces)
    return data


class DataStore:
    """A folder of data pieces, each a file of plain tensors and lists (`torch.load` reads it without unpickling
    code) with the seconds it took to write."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.seconds = 0.0

    def get(self, name: str) -> Sequences | None:
        path = self.folder / f"{name}.pt"
        if not path.is_file():
            return None
        raw = torch.load(path)
        self.seconds += raw.pop("seconds")
        return Sequences(**raw)

    def drop(self, pattern: str, keep: str) -> None:
        """Remove the pieces matching `pattern` other than `keep`."""
        for path in self.folder.glob(f"{pattern}.pt"):
            if path.stem != keep:
                path.unlink()

    def put(self, name: str, seqs: Sequences, seconds: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f"{name}.pt.part"
        seconds = round(seconds, 1)  # what is kept, so that a rerun that reads the piece sums the same seconds
        torch.save({**vars(seqs), "seconds": seconds}, tmp)
        tmp.replace(self.folder / f"{name}.pt")  # a killed run leaves no half-written piece
        self.seconds += seconds


def cached(store: DataStore | None, name: str, make) -> Sequences:
    """Piece `name` from `store` when it holds it, else made (and kept there)."""
    if store is not None and (got := store.get(name)) is not None:
        return got
    t0 = time.perf_counter()
    seqs = make()
    if store is not None:
        store.put(name, seqs, time.perf_counter() - t0)
    return seqs
