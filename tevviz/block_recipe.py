"""The recipe of the embedded pair's block drafter: DFlash's layout, trained on the stdlib target's own writing.

Contexts are windows of the stdlib's training files; the target continues each one (half greedy, half sampled at
T = 1), and its features at `target_layer_ids` are computed once over every sequence. Training then draws random
anchors in the target-written part (docs/math.md, *Training a block drafter*). Offline, CPU, seeded.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time
from pathlib import Path

import torch

from .engine.block_model import BlockDraftModel, block_config_dict, parse_config, save_block_drafter
from .engine.block_training import block_batch, block_logits, block_loss, chain_acceptance, cosine_lr

DEFAULT_OUT = "assets/models/tevviz-stdlib-block-draft"


def _say(msg: str) -> None:
    print(msg, flush=True)


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
        _say(f"  {'sampled' if sample else 'greedy'} continuations: {min(i + batch, contexts.shape[0])}"
             f"/{contexts.shape[0]}")
    return torch.cat(out)


@torch.inference_mode()
def features_of(target, seqs: torch.Tensor, layer_ids: list[int], batch: int) -> torch.Tensor:
    """(n, L, F) bfloat16: the target's features of every position of every sequence."""
    out = []
    for i in range(0, seqs.shape[0], batch):
        hs = target(seqs[i : i + batch], output_hidden_states=True).hidden_states
        out.append(torch.cat([hs[j + 1] for j in layer_ids], dim=-1).to(torch.bfloat16))
    return torch.cat(out)


def sample_anchors(n_seq: int, per_seq: int, lo: int, hi: int, gen: torch.Generator) -> torch.Tensor:
    """(n_seq, per_seq) distinct anchors in [lo, hi] per sequence."""
    return torch.stack([torch.randperm(hi - lo + 1, generator=gen)[:per_seq] + lo for _ in range(n_seq)])


def evaluate(model, target, seqs, feats, lo: int, bs: int, mask_id: int, seed: int = 0) -> dict:
    """Held-out T = 0 chain acceptance by depth and the depth-1 top-4 hit rate."""
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    with torch.inference_mode():
        anchors = sample_anchors(seqs.shape[0], 8, lo, seqs.shape[1] - bs, gen)
        batch = block_batch(seqs, feats.float(), anchors, bs, mask_id)
        logits = block_logits(model, target, batch)
        top4 = (logits[:, :, 0].topk(4, dim=-1).indices == batch.labels[:, :, :1]).any(-1).float().mean()
        acc = chain_acceptance(logits, batch.labels)
        loss = float(block_loss(logits, batch.labels, None))
    model.train()
    return {"chain_acceptance": [round(x, 4) for x in acc], "top4_depth1": round(float(top4), 4),
            "loss": round(loss, 4), "tau_chain": round(1 + sum(acc), 4)}


def build_data(args, target, tok, rng: random.Random) -> dict:
    """Target-written training and held-out sequences and their features."""
    from .demo_pair import encode_corpus, stdlib_files

    train_files, held_files = stdlib_files()
    rng.shuffle(train_files)
    t0 = time.perf_counter()
    train_stream = encode_corpus(tok, train_files[: args.files])
    held_stream = encode_corpus(tok, held_files)
    data = {}
    for name, stream, n in (("train", train_stream, args.seqs), ("held", held_stream, args.eval_seqs)):
        ctx = windows(stream, n, args.context, rng)
        half = n // 2 if name == "train" else 0  # held-out: greedy only (T = 0 acceptance)
        greedy = continue_windows(target, ctx[half:], args.new_tokens, False, args.gen_batch)
        sampled = continue_windows(target, ctx[:half], args.new_tokens, True, args.gen_batch) if half else greedy[:0]
        seqs = torch.cat([sampled, greedy])
        data[name] = (seqs, features_of(target, seqs, args.layer_ids, args.gen_batch))
        _say(f"{name}: {seqs.shape[0]} sequences of {seqs.shape[1]} tokens ({time.perf_counter() - t0:.0f} s)")
    counts = torch.bincount(data["train"][0].flatten(), minlength=target.get_output_embeddings().weight.shape[0])
    counts[tok.eos_token_id] = counts.max() + 1  # never the mask: EOS is a real root
    data["mask_id"] = int(torch.argmin(counts.flip(0)).item())
    data["mask_id"] = counts.numel() - 1 - data["mask_id"]  # the rarest id, the highest on ties
    return data


def train(args, model, target, data) -> list[dict]:
    """The training loop; returns the log (loss, held-out acceptance)."""
    seqs, feats = data["train"]
    bs, lo = args.block_size, args.context
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed)
    log, t0, running, best = [], time.perf_counter(), 0.0, None
    model.train()
    for step in range(1, args.steps + 1):
        for g in opt.param_groups:
            g["lr"] = args.lr * cosine_lr(step, args.steps, args.warmup, 0.05)
        idx = torch.randint(0, seqs.shape[0], (args.batch,), generator=gen)
        anchors = sample_anchors(args.batch, args.anchors, lo, seqs.shape[1] - bs, gen)
        batch = block_batch(seqs[idx], feats[idx].float(), anchors, bs, data["mask_id"])
        loss = block_loss(block_logits(model, target, batch), batch.labels, args.gamma)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running = loss.item() if step == 1 else 0.98 * running + 0.02 * loss.item()
        if step % args.eval_every == 0 or step == args.steps:
            ev = evaluate(model, target, *data["held"], lo, bs, data["mask_id"])
            log.append({"step": step, "loss": round(running, 4), "seconds": round(time.perf_counter() - t0, 1), **ev})
            _say(f"step {step}: loss {running:.3f}, held-out chain acceptance {ev['chain_acceptance'][:4]}, "
                 f"tau {ev['tau_chain']}, top-4 at depth 1 {ev['top4_depth1']} ({time.perf_counter() - t0:.0f} s)")
            # A small target-written corpus is memorised after a while: keep the weights held-out text likes best.
            if best is None or ev["tau_chain"] > best[0]:
                best = (ev["tau_chain"], step, copy.deepcopy(model.state_dict()))
    if best is not None:
        model.load_state_dict(best[2])
        log.append({"kept_step": best[1], "tau_chain": best[0]})
    return log


def main(argv: list[str] | None = None) -> int:
    """Make the embedded pair's block drafter (`tevviz pair train-drafter stdlib --kind block`)."""
    ap = argparse.ArgumentParser(prog="tevviz pair train-drafter stdlib --kind block", description=__doc__)
    ap.add_argument("--out", default=DEFAULT_OUT, help="the drafter folder to write (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=2500, help="optimiser steps (default: %(default)s)")
    ap.add_argument("--files", type=int, default=300, help="stdlib training files drawn for contexts")
    ap.add_argument("--seqs", type=int, default=1536, help="target-written training sequences")
    ap.add_argument("--eval-seqs", type=int, default=96, help="held-out sequences (held-out stdlib files)")
    ap.add_argument("--context", type=int, default=64, help="context tokens before the target writes")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens the target writes per sequence")
    ap.add_argument("--block-size", type=int, default=8, help="bs: the root and bs - 1 drafted depths")
    ap.add_argument("--layers", type=int, default=2, help="drafter decoder layers")
    ap.add_argument("--intermediate", type=int, default=512, help="drafter MLP width")
    ap.add_argument("--layer-ids", type=lambda s: [int(x) for x in s.split(",")], default=[1, 6, 10],
                    help="target layers read (comma-separated, 0-based)")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=8, help="blocks per sequence per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--gamma", type=float, default=4.0, help="loss decay by depth, exp(-(k - 1) / gamma)")
    ap.add_argument("--eval-every", type=int, default=250, help="held-out checks; the best one's weights are kept")
    ap.add_argument("--gen-batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from .engine.models import ModelSource

    pair = ModelSource(device="cpu").load()
    target, tok = pair.target, pair.tokenizer
    t0 = time.perf_counter()
    data = build_data(args, target, tok, random.Random(args.seed))
    data_s = time.perf_counter() - t0
    layers, hidden, vocab = target.config.num_hidden_layers, target.config.hidden_size, target.config.vocab_size
    raw = block_config_dict(hidden, args.layers, target.config.num_attention_heads,
                            target.config.num_key_value_heads, args.intermediate, vocab, args.block_size,
                            data["mask_id"], args.layer_ids, layers,
                            rope_theta=target.config.rope_parameters["rope_theta"],
                            max_positions=target.config.max_position_embeddings)
    model = BlockDraftModel(parse_config(raw, "recipe", target))
    n_params = sum(p.numel() for p in model.parameters())
    _say(f"block drafter: {n_params / 1e6:.2f} M parameters, mask token {data['mask_id']}")
    log = train(args, model, target, data)
    save_block_drafter(model.eval(), args.out)
    out = Path(args.out)
    record = {"recipe": "tevviz.block_recipe", "settings": vars(args), "parameters": n_params,
              "data_seconds": round(data_s, 1), "train_seconds": round(time.perf_counter() - t0 - data_s, 1),
              "log": log}
    (out / "training_log.json").write_text(json.dumps(record, indent=1) + "\n")
    _say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
