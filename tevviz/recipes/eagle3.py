"""`tevviz pair train-drafter NAME --kind eagle3`: an EAGLE-3 head for a pair's target, trained on the target-written
data the block recipe keeps (`--data`, features at EAGLE's layers) with training-time test (SPEC section 11).

The head reads the target's states at the data's layers, embeds with the target's frozen embedding and drafts over a
reduced vocabulary: the most frequent target-written tokens of the training data, ascending, mapped by d2t / t2d.
Each step unrolls the head `--ttt` times: step 0 reads the target's states, step k its own state of step k - 1 with
the true next token, at position + k, seeing the committed pairs and its own earlier steps of the same row (as a
drafted node sees its ancestors); the loss of step k weighs `--decay`**k, on target-written tokens only. Held-out
chain acceptance by depth (T = 0) is measured every `--eval-every` steps; the best held-out weights are kept.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from ..engine.draft.eagle3_config import VLLM, dialect_config, parse_head_config
from ..engine.draft.eagle3_io import load_head, save_head
from ..engine.draft.eagle3_model import Eagle3Head, LayerReading
from ..engine.errors import TevvizError
from ..engine.train.eagle3_rows import Packed, draft_index, ttt_loss, unroll
from ..engine.train.schedule import lr_scale
from .block_data import DataStore, Sequences, say

RECIPES = {"smollm2": {"out": "assets/models/tevviz-smollm2-eagle3-head",
                       "data": "~/.cache/tevviz/smollm2-eagle3-data", "layer_ids": (1, 14, 26)}}


def pack(seqs: Sequences, idx: list[int]) -> Packed:
    """The sequences `idx` packed; a pair (state t, token t + 1) sits at row t of its sequence."""
    tokens, feats, pos, seq, written, last, rows = [], [], [], [], [], [], []
    at = 0
    for s, i in enumerate(idx):
        ids, n = seqs.tokens[i], seqs.tokens[i].numel()
        tokens.append(ids)
        feats.append(seqs.feats[i].float())
        pos.append(torch.arange(n))
        seq.append(torch.full((n,), s))
        written.append(torch.arange(n) > seqs.first[i])
        last.append(torch.full((n,), at + n - 1))
        rows.append(torch.arange(max(seqs.first[i] - 1, 0), n - 2) + at)  # row t drafts token t + 2 at step 0
        at += n
    cat = torch.cat
    return Packed(cat(tokens), cat(feats), cat(pos), cat(seq), cat(written), cat(last), cat(rows))


@torch.inference_mode()
def evaluate(model: Eagle3Head, held: Sequences, vocab: torch.Tensor, depth: int, per_call: int = 8) -> dict:
    """Held-out T = 0 chain acceptance by depth over every target-written root: the drafts of depth d all equal the
    target's tokens (a token outside the draft vocabulary is a miss); tau of that chain, and step 0's loss."""
    model.eval()
    hits, losses = [], []
    for s in range(0, len(held), per_call):
        b = pack(held, list(range(s, min(s + per_call, len(held)))))
        steps = unroll(model, b, depth, vocab)
        written = (b.rows + 2 <= b.last[b.rows]) & b.written[(b.rows + 2).clamp(max=b.tokens.numel() - 1)]
        hit = torch.stack([(logits.argmax(-1) == label) & (label >= 0) for logits, label in steps], 1)
        roots = written  # a written token outside the draft vocabulary is a miss, not skipped
        hits.append(torch.cumprod(hit[roots].float(), 1))
        losses.append(float(ttt_loss(steps[:1], 1.0)))
    model.train()
    acc = torch.cat(hits).mean(0).tolist()
    return {"chain_acceptance": [round(x, 4) for x in acc], "tau_chain": round(1 + sum(acc), 4),
            "loss": round(sum(losses) / len(losses), 4), "roots": int(torch.cat(hits).shape[0])}


def draft_vocabulary(train: Sequences, vocab_size: int, size: int) -> torch.Tensor:
    """The `size` most frequent target-written tokens of the training data, ascending (ties: the lower id)."""
    written = [t[f + 1:] for t, f in zip(train.tokens, train.first)]
    counts = torch.bincount(torch.cat(written), minlength=vocab_size)[:vocab_size].double()
    counts -= torch.arange(vocab_size) / (2 * vocab_size)  # a stable tie-break towards lower ids
    return torch.sort(counts.topk(min(size, vocab_size)).indices).values


def build_head(target, layer_ids: tuple[int, ...], draft_ids: torch.Tensor) -> Eagle3Head:
    """A head for `target` reading decoder layers `layer_ids` (hidden_states + 1), over the draft vocabulary
    `draft_ids`, with the target's frozen embedding; its lm_head rows and final norm start from the target's."""
    tc = target.config.get_text_config()
    theta = (getattr(tc, "rope_parameters", None) or {}).get("rope_theta") or getattr(tc, "rope_theta", 10000.0)
    decoder = {"model_type": "llama", "hidden_size": tc.hidden_size, "intermediate_size": tc.intermediate_size,
               "num_hidden_layers": 1, "num_attention_heads": tc.num_attention_heads,
               "num_key_value_heads": tc.num_key_value_heads, "head_dim": tc.hidden_size // tc.num_attention_heads,
               "hidden_act": "silu", "rms_norm_eps": tc.rms_norm_eps, "rope_theta": theta,
               "max_position_embeddings": tc.max_position_embeddings, "vocab_size": tc.vocab_size,
               "tie_word_embeddings": False}
    ids = tuple(i + 1 for i in layer_ids)
    base = parse_head_config({**decoder, "architectures": ["Eagle3LlamaForCausalLM"],
                              "draft_vocab_size": int(draft_ids.numel()),
                              "eagle_aux_hidden_state_layer_ids": list(ids)}, "recipe")
    cfg = parse_head_config(dialect_config(base, VLLM, ids, tc.num_hidden_layers), "recipe")
    reading = LayerReading(ids, f"trained on hidden_states {list(ids)}", False)
    model = Eagle3Head(cfg, tc.hidden_size, tc.num_hidden_layers, reading, False, False, False)
    with torch.no_grad():
        model.d2t.copy_(draft_ids - torch.arange(draft_ids.numel()))
        model.t2d.zero_()[draft_ids] = True
        model.lm_head.weight.copy_(target.get_output_embeddings().weight[draft_ids].float())
        inner = target.get_decoder() if hasattr(target, "get_decoder") else target.model
        model.norm.weight.copy_(inner.norm.weight.float())
    emb = target.get_input_embeddings()
    emb.requires_grad_(False)
    model.use_target_embedding(emb)
    return model


def start_head(args, target, train_seqs: Sequences) -> Eagle3Head:
    """The head training starts from: `--init`'s (checked to read the data's layers) or a new one."""
    if args.init is None:
        draft_ids = draft_vocabulary(train_seqs, target.config.vocab_size, args.draft_vocab)
        return build_head(target, tuple(args.layer_ids), draft_ids)
    model = load_head(args.init, target).float().requires_grad_(True)
    want = tuple(i + 1 for i in args.layer_ids)
    if tuple(model.layer_ids) != want:
        raise TevvizError(f"--init {args.init} reads hidden_states {list(model.layer_ids)}, the data's features are "
                          f"at {list(want)}: --layer-ids must name the head's layers")
    return model.train()


def train(args, model: Eagle3Head, data: dict, more=None) -> list[dict]:
    """The training loop (AdamW, warm-up then cosine over `--steps` or the wall cap, whichever ends first); returns
    the log and leaves the best held-out weights in. `more()` may hand new training pieces between checks."""
    vocab = data["vocab"]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    log, t0, running, best, cap = [], time.perf_counter(), None, None, args.max_minutes * 60
    model.train()
    for step in range(1, args.steps + 1):
        elapsed = time.perf_counter() - t0
        progress = max(step, int(args.steps * elapsed / cap)) if cap > 0 else step
        for g in opt.param_groups:
            g["lr"] = args.lr * lr_scale(min(progress, args.steps), args.steps, args.warmup, 0.05)
        seqs = data["train"]
        idx = torch.randint(0, len(seqs), (args.batch,), generator=gen).tolist()
        loss = ttt_loss(unroll(model, pack(seqs, idx), args.ttt, vocab), args.decay)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        over = cap > 0 and time.perf_counter() - t0 > cap
        if step % args.eval_every == 0 or step == args.steps or over:
            ev = evaluate(model, data["held"], vocab, args.eval_depth)
            log.append({"step": step, "train_loss": round(running, 4), "seconds": round(time.perf_counter() - t0, 1),
                        "train_sequences": len(seqs), **ev})
            say(f"step {step}: loss {running:.3f}, held-out chain acceptance {ev['chain_acceptance']}, tau "
                f"{ev['tau_chain']} ({time.perf_counter() - t0:.0f} s, {len(seqs)} training sequences)")
            if best is None or ev["tau_chain"] > best[0]:
                best = (ev["tau_chain"], step, copy.deepcopy(model.state_dict()))
            if more is not None:
                data["train"] = more(data["train"])
        if over:
            say(f"wall cap of {args.max_minutes} minutes reached at step {step}")
            break
    if best is not None:
        model.load_state_dict(best[2])
        log.append({"kept_step": best[1], "tau_chain": best[0]})
    return log


def read_data(folder: Path, seen: set[str] | None = None) -> tuple[Sequences | None, list[Sequences], set[str]]:
    """The held-out set and the training pieces of a data folder written by the block recipe (`train-*.pt`), but
    those already `seen`; the names read."""
    store, seen = DataStore(folder), set(seen or ())
    held = store.get("held") if not seen else None
    names = sorted(p.stem for p in folder.glob("train-*.pt") if p.stem not in seen)
    return held, [store.get(n) for n in names], seen | set(names)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The recipe's options; the pair's own defaults (RECIPES) fill what the command line leaves out."""
    ap = argparse.ArgumentParser(prog="tevviz pair train-drafter NAME --kind eagle3", description=__doc__)
    ap.add_argument("name", choices=sorted(RECIPES), help="the pair whose target the head reads")
    ap.add_argument("--data", type=Path, default=None, help="the block recipe's data folder (held.pt, train-*.pt), "
                    "written with --layer-ids at the head's layers (default: the pair's)")
    ap.add_argument("--layer-ids", type=lambda s: tuple(int(x) for x in s.split(",")), default=None,
                    help="decoder layers (0-based) the data's features hold, in order (default: EAGLE's "
                         "[2, N // 2, N - 3] as hidden_states indices)")
    ap.add_argument("--out", default=None, help="the head folder to write (default: the pair's in assets/models)")
    ap.add_argument("--init", default=None, help="a head folder to continue training from: its weights and draft "
                    "vocabulary (default: a new head, its lm_head and norm from the target's)")
    ap.add_argument("--steps", type=int, default=4000, help="optimiser steps at most (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step (default: %(default)s)")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=50, help="warm-up steps (default: %(default)s)")
    ap.add_argument("--ttt", type=int, default=3, help="training-time test: steps unrolled (default: %(default)s)")
    ap.add_argument("--decay", type=float, default=0.8, help="loss weight of step k: decay**k (default: %(default)s)")
    ap.add_argument("--draft-vocab", type=int, default=8192, help="draft vocabulary size (default: %(default)s)")
    ap.add_argument("--eval-every", type=int, default=100, help="held-out checks; the best weights are kept")
    ap.add_argument("--eval-depth", type=int, default=4, help="held-out chain depth measured (default: %(default)s)")
    ap.add_argument("--eval-seqs", type=int, default=48, help="held-out sequences measured (default: %(default)s)")
    ap.add_argument("--max-minutes", type=float, default=0.0, help="wall cap on training (0: none); the schedule "
                    "follows it and the best held-out checkpoint is kept")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rec = RECIPES[args.name]
    args.out = args.out or rec["out"]
    args.data = Path(args.data or rec["data"]).expanduser()
    args.layer_ids = args.layer_ids or rec["layer_ids"]
    for name in ("steps", "batch", "ttt", "draft_vocab", "eval_every", "eval_depth", "eval_seqs", "threads"):
        if getattr(args, name) < 1:
            raise TevvizError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Make a pair's EAGLE-3 head (`tevviz pair train-drafter NAME --kind eagle3`)."""
    from .block import load_target

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    held, pieces, seen = read_data(args.data)
    if held is None or not pieces:
        raise TevvizError(f"--data {args.data} holds no held.pt and train-*.pt pieces: write them first with "
                          f"python3 -m tevviz.recipes.block {args.name} --data {args.data} --layer-ids "
                          f"{','.join(map(str, args.layer_ids))} --data-only")
    target, _ = load_target(args.name)
    width = held.feats[0].shape[-1]
    if width != len(args.layer_ids) * target.config.hidden_size:
        raise TevvizError(f"--data features are {width} wide, not {len(args.layer_ids)} target states of "
                          f"{target.config.hidden_size}: --layer-ids must name the data's layers")
    train_seqs = Sequences.join(pieces)
    model = start_head(args, target, train_seqs)
    vocab = draft_index(model)
    held = Sequences(held.tokens[: args.eval_seqs], held.feats[: args.eval_seqs], held.first[: args.eval_seqs])
    n_params = sum(p.numel() for p in model.parameters())
    say(f"EAGLE-3 head: {n_params / 1e6:.2f} M parameters (the target's embedding not counted), draft vocabulary "
        f"{model.d2t.numel()}, hidden_states {list(model.layer_ids)}; {len(train_seqs)} training sequences "
        f"({train_seqs.count()} written tokens), {len(held)} held-out")

    def more(current: Sequences) -> Sequences:
        nonlocal seen
        _, new, seen = read_data(args.data, seen)
        if new:
            say(f"data: {sum(len(p) for p in new)} more training sequences")
        return Sequences.join([current, *new]) if new else current

    t0 = time.perf_counter()
    log = train(args, model, {"train": train_seqs, "held": held, "vocab": vocab}, more)
    save_head(model.eval(), args.out, VLLM, torch.bfloat16)
    out = Path(args.out)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    record = {"recipe": "tevviz.recipes.eagle3", "settings": settings, "parameters": n_params,
              "draft_vocab_size": int(model.d2t.numel()), "hidden_states": list(model.layer_ids),
              "train_pieces": sorted(seen), "train_seconds": round(time.perf_counter() - t0, 1), "log": log}
    (out / "training_log.json").write_text(json.dumps(record, indent=1) + "\n")
    say(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
