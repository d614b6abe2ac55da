"""`tevviz pair train-drafter NAME --kind block`: a block drafter in DFlash's layout, trained on its target's writing.

stdlib: windows of the stdlib's training files continued by the embedded target. A fetched chat pair (smollm2):
the target's answers to the offline chat prompts. Half the training text is greedy, half sampled at T = 1; the
target's features at `target_layer_ids` are computed once over every sequence. Training then draws random anchors
in the target-written part (docs/math.md, *Training a block drafter*) and keeps the weights whose held-out chain
acceptance is best. Offline, CPU, seeded.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path

import torch

from ..engine.draft.block_model import (
    BlockDraftModel,
    block_config_dict,
    default_layer_ids,
    parse_config,
    save_block_drafter,
)
from ..engine.errors import TevvizError
from ..engine.train.block_training import block_logits, block_loss
from ..engine.train.schedule import lr_scale
from .block_data import DataStore, Sequences, chat_data, rarest_id, say, stdlib_data

# Per pair: where the drafter goes and the settings that differ from the stdlib pair's.
RECIPES = {
    "stdlib": {"out": "assets/models/tevviz-stdlib-block-draft", "defaults": {}},
    "smollm2": {"out": "assets/models/tevviz-smollm2-block-draft",
                "defaults": {"seqs": 2560, "eval_seqs": 96, "new_tokens": 64, "block_size": 5, "layers": 2,
                             "intermediate": 1536, "batch": 8, "anchors": 8, "lr": 6e-4, "steps": 4000,
                             "warmup": 150, "gamma": 2.5, "gen_batch": 64, "eval_every": 500,
                             "save_dtype": "bfloat16", "init_from_target": True}},
}


def init_from_target(model: BlockDraftModel, target) -> list[str]:
    """Start the drafter's final norm and decoder layers from the target's last ones where the shapes agree (the
    head then reads hidden states of the scale it was trained on); the names of the weights copied."""
    inner = target.get_decoder() if hasattr(target, "get_decoder") else target.model
    theirs = {"norm.weight": inner.norm.weight}
    n, layers = len(model.layers), inner.layers
    for i in range(n):
        for k, v in layers[len(layers) - n + i].state_dict().items():
            theirs[f"layers.{i}.{k}"] = v
    ours = model.state_dict()
    copied = [k for k, v in theirs.items() if k in ours and ours[k].shape == v.shape]
    model.load_state_dict({k: theirs[k].detach().clone() for k in copied}, strict=False)
    return copied


def evaluate(model, target, held: Sequences, bs: int, mask_id: int, seed: int = 0, per_call: int = 16) -> dict:
    """Held-out T = 0 chain acceptance by depth and the depth-1 top-4 hit rate (8 fixed anchors per sequence)."""
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    hits, top4, losses = [], [], []
    with torch.inference_mode():
        for s in range(0, len(held), per_call):
            batch = held.draw(list(range(s, min(s + per_call, len(held)))), 8, bs, mask_id, gen)
            logits = block_logits(model, target, batch)
            top4.append((logits[:, :, 0].topk(4, dim=-1).indices == batch.labels[:, :, :1]).any(-1).flatten())
            hits.append(torch.cumprod((logits.argmax(-1) == batch.labels).float().flatten(0, 1), dim=1))
            losses.append(float(block_loss(logits, batch.labels, None)))
    model.train()
    acc = torch.cat(hits).mean(0).tolist()
    return {"chain_acceptance": [round(x, 4) for x in acc], "top4_depth1": round(float(torch.cat(top4).float()
                                                                                     .mean()), 4),
            "loss": round(sum(losses) / len(losses), 4), "tau_chain": round(1 + sum(acc), 4)}


def train(args, model, target, data: dict) -> list[dict]:
    """The training loop; returns the log (loss, held-out acceptance) and leaves the best held-out weights in."""
    seqs, bs = data["train"], args.block_size
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(args.seed)
    log, t0, running, best = [], time.perf_counter(), 0.0, None
    model.train()
    for step in range(1, args.steps + 1):
        for g in opt.param_groups:
            g["lr"] = args.lr * lr_scale(step, args.steps, args.warmup, 0.05)
        idx = torch.randint(0, len(seqs), (args.batch,), generator=gen).tolist()
        batch = seqs.draw(idx, args.anchors, bs, data["mask_id"], gen)
        loss = block_loss(block_logits(model, target, batch), batch.labels, args.gamma)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running = loss.item() if step == 1 else 0.98 * running + 0.02 * loss.item()
        if step % args.eval_every == 0 or step == args.steps:
            ev = evaluate(model, target, data["held"], bs, data["mask_id"])
            log.append({"step": step, "loss": round(running, 4), "seconds": round(time.perf_counter() - t0, 1), **ev})
            say(f"step {step}: loss {running:.3f}, held-out chain acceptance {ev['chain_acceptance'][:4]}, "
                f"tau {ev['tau_chain']}, top-4 at depth 1 {ev['top4_depth1']} ({time.perf_counter() - t0:.0f} s)")
            # A small target-written corpus is memorised after a while: keep the weights held-out text likes best.
            if best is None or ev["tau_chain"] > best[0]:
                best = (ev["tau_chain"], step, copy.deepcopy(model.state_dict()))
    if best is not None:
        model.load_state_dict(best[2])
        log.append({"kept_step": best[1], "tau_chain": best[0]})
    return log


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The recipe's options; the pair's own defaults (RECIPES) fill what the command line leaves out."""
    ap = argparse.ArgumentParser(prog="tevviz pair train-drafter NAME --kind block", description=__doc__)
    ap.add_argument("name", choices=sorted(RECIPES), help="the pair whose target the drafter reads")
    ap.add_argument("--out", default=None, help="the drafter folder to write (default: the pair's in assets/models)")
    ap.add_argument("--steps", type=int, default=2500, help="optimiser steps (default: %(default)s)")
    ap.add_argument("--files", type=int, default=300, help="stdlib: training files drawn for contexts")
    ap.add_argument("--seqs", type=int, default=1536, help="target-written training sequences")
    ap.add_argument("--eval-seqs", type=int, default=96, help="held-out sequences (held-out files or prompts)")
    ap.add_argument("--context", type=int, default=64, help="stdlib: context tokens before the target writes")
    ap.add_argument("--new-tokens", type=int, default=64, help="tokens the target writes per sequence")
    ap.add_argument("--block-size", type=int, default=8, help="bs: the root and bs - 1 drafted depths")
    ap.add_argument("--layers", type=int, default=2, help="drafter decoder layers")
    ap.add_argument("--intermediate", type=int, default=512, help="drafter MLP width")
    ap.add_argument("--layer-ids", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="target layers read (comma-separated, 0-based; default: stdlib 1,6,10, else DFlash's rule "
                         "for three ids)")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--anchors", type=int, default=8, help="blocks per sequence per step")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (warm-up, then cosine to 5%%)")
    ap.add_argument("--warmup", type=int, default=200, help="warm-up steps")
    ap.add_argument("--gamma", type=float, default=4.0, help="loss decay by depth, exp(-(k - 1) / gamma)")
    ap.add_argument("--eval-every", type=int, default=250, help="held-out checks; the best one's weights are kept")
    ap.add_argument("--gen-batch", type=int, default=128, help="sequences per target pass while writing the data")
    ap.add_argument("--save-dtype", choices=("float32", "bfloat16"), default="float32",
                    help="weights on disk (tevviz computes in the target's dtype either way)")
    ap.add_argument("--init-from-target", action="store_true",
                    help="start the decoder layers and final norm from the target's last ones (default for chat pairs)")
    ap.add_argument("--data", type=Path, default=None,
                    help="a folder to keep the written data in, in pieces: those present are reused, the rest written")
    ap.add_argument("--piece", type=int, default=512, help="chat pairs: answers per data piece")
    ap.add_argument("--data-only", action="store_true", help="stop after the data stage")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--seed", type=int, default=0)
    argv = sys.argv[1:] if argv is None else argv  # run as a module, the command line is what the user gave
    given = {a.split("=")[0].lstrip("-").replace("-", "_") for a in argv if a.startswith("--")}
    args = ap.parse_args(argv)
    for k, v in RECIPES[args.name]["defaults"].items():
        if k not in given:
            setattr(args, k, v)
    args.out = args.out or RECIPES[args.name]["out"]
    return args


def load_target(name: str):
    """The pair's target and tokenizer, float32 on the CPU."""
    from ..engine.load.models import load_model, load_tokenizer
    from ..engine.load.pairs import named_pair

    path = named_pair(name).target_path()
    if not (path / "config.json").is_file():
        raise TevvizError(f"fetch the target first: tevviz pair fetch {name}")
    return load_model(str(path), "target", dtype="float32", device="cpu"), load_tokenizer(str(path), "target")


def written_data(args, target, tok) -> dict:
    """The recipe's data, written by the target; with `--data`, kept in that folder in pieces and reused from it
    (a rerun, or one asking for more sequences, writes only the pieces it lacks)."""
    store = DataStore(args.data) if args.data is not None else None
    make = stdlib_data if args.name == "stdlib" else chat_data
    t0 = time.perf_counter()
    data: dict = make(args, target, tok, random.Random(args.seed), store)
    data["mask_id"] = rarest_id(data["train"], target.get_output_embeddings().weight.shape[0],
                                {tok.eos_token_id} if tok.eos_token_id is not None else set())
    data["seconds"] = round(store.seconds if store is not None else time.perf_counter() - t0, 1)
    return data


def main(argv: list[str] | None = None) -> int:
    """Make a pair's block drafter (`tevviz pair train-drafter NAME --kind block`)."""
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    target, tok = load_target(args.name)
    conf = target.config
    layers = conf.num_hidden_layers
    if args.layer_ids is None:
        args.layer_ids = [1, 6, 10] if args.name == "stdlib" else default_layer_ids(3, layers)
    t0 = time.perf_counter()
    data = written_data(args, target, tok)
    if args.data_only:
        say(f"data: {len(data['train'])} training sequences ({data['train'].count()} written tokens), "
            f"{len(data['held'])} held-out, {data['seconds']:.0f} s of writing")
        return 0
    raw = block_config_dict(conf.hidden_size, args.layers, conf.num_attention_heads, conf.num_key_value_heads,
                            args.intermediate, conf.vocab_size, args.block_size, data["mask_id"], args.layer_ids,
                            layers, rope_theta=conf.rope_parameters["rope_theta"],
                            max_positions=conf.max_position_embeddings, eps=conf.rms_norm_eps)
    model = BlockDraftModel(parse_config(raw, "recipe", target))
    if args.init_from_target:
        say(f"initialised from the target: {len(init_from_target(model, target))} weights")
    n_params = sum(p.numel() for p in model.parameters())
    say(f"block drafter: {n_params / 1e6:.2f} M parameters, mask token {data['mask_id']}, target layers "
        f"{args.layer_ids}; {len(data['train'])} training sequences ({data['train'].count()} written tokens)")
    t_train = time.perf_counter()
    log = train(args, model, target, data)
    save_block_drafter(model.eval(), args.out, getattr(torch, args.save_dtype))
    out = Path(args.out)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    record = {"recipe": "tevviz.recipes.block", "settings": settings, "parameters": n_params,
              "train_tokens": data["train"].count(), "data_seconds": data["seconds"],
              "train_seconds": round(time.perf_counter() - t_train, 1),
              "wall_seconds": round(time.perf_counter() - t0, 1), "log": log}
    (out / "training_log.json").write_text(json.dumps(record, indent=1) + "\n")
    say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
