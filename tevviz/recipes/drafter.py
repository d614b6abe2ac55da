"""`tevviz pair train-drafter NAME`: train a small drafter for a fetched pretrained target, offline, on a CPU.

The recipe, in three resumable stages under --work:
1. data: the target answers offline chat prompts (tevviz.recipes.chat_prompts), half greedily and half sampled at
   T = 1, batched; at every generated position the target's top-k log-probabilities are kept, so the
   drafter learns the target's distribution, not only its samples (text that follows the target's law).
   Asking for more --prompts than a finished data stage holds answers only the new ones and appends them;
   past the number of training prompts, prompts are answered again at T = 1 (fresh samples of the law).
2. train: a Llama drafter with the target's tokenizer and vocabulary, its tied embedding initialised from
   the target's embedding projected on its leading principal directions (or a drafter to go on from,
   --init), trained with cross-entropy against the target's (renormalised) top-k distribution at each
   answer position.
3. save: bfloat16 weights (config says float32, so tevviz computes in float32), the target's tokenizer
   byte for byte, and held-out figures (argmax agreement, sum of min(p, q) over the target's top-k).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shutil
import sys
import time
from pathlib import Path

import torch

from ..engine.core.sampling import SamplingConfig
from ..engine.decode.streams import continue_batch
from ..engine.errors import TevvizError
from ..engine.train.schedule import lr_scale


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def answer_batch(target, ids: torch.Tensor, mask: torch.Tensor, sample: bool, new_tokens: int, k: int, eos: int,
                 gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded prompts answered greedily or at T = 1 (engine/decode/streams.py): answers (B x n) and the target's
    top-k log-probabilities at each answer position (B x n x k), in batches sharing one KV cache."""
    return continue_batch(target, ids, mask, SamplingConfig(temperature=1.0 if sample else 0.0), new_tokens, gen,
                          {eos}, top_k=k)


def generate_examples(target, tokenizer, prompts: list[str], sample: bool, new_tokens: int, batch: int, k: int,
                      seed: int) -> list[dict]:
    """Target answers to chat prompts, with the target's top-k distribution at each answer position."""
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    gen = torch.Generator().manual_seed(seed)
    out: list[dict] = []
    t0 = time.perf_counter()
    # Prompts of similar length share a batch, so little compute goes to padding.
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                           tokenize=False) for p in prompts]
    order = sorted(range(len(texts)), key=lambda j: len(texts[j]))
    for start in range(0, len(order), batch):
        chunk = [texts[j] for j in order[start:start + batch]]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        answers, logp, ids = answer_batch(target, enc["input_ids"], enc["attention_mask"], sample, new_tokens, k,
                                          eos, gen)
        for b in range(len(chunk)):
            prompt = enc["input_ids"][b][enc["attention_mask"][b].bool()].tolist()
            answer = answers[b].tolist()
            if eos in answer:
                answer = answer[:answer.index(eos) + 1]
            n = len(answer)
            out.append({"prompt": prompt, "answer": answer, "logp": logp[b, :n].clone(), "ids": ids[b, :n].clone(),
                        "sampled": sample})
        done = start + len(chunk)
        rate = done / (time.perf_counter() - t0)
        _say(f"  data ({'T=1' if sample else 'greedy'}): {done}/{len(prompts)} prompts, "
             f"ETA {(len(prompts) - done) / rate / 60:.1f} min")
    return out


def answer_plan(n_train: int, done: int, total: int) -> list[tuple[int, bool]]:
    """(prompt index, sampled) for answers done..total-1: unseen prompts half greedily, half at T = 1 (as a
    first run of `total` answers is split); answers past n_train revisit prompts at T = 1 only."""
    fresh = list(range(done, min(total, n_train)))
    half = len(fresh) // 2
    again = [(j % n_train, True) for j in range(max(done, n_train), total)]
    return [(j, False) for j in fresh[:half]] + [(j, True) for j in fresh[half:]] + again


def make_drafter(target, hidden: int, layers: int, heads: int, intermediate: int):
    """A Llama drafter with the target's vocabulary, its tied embedding from the target's principal directions."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tc = target.config.get_text_config()
    config = LlamaConfig(
        vocab_size=tc.vocab_size, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=tc.max_position_embeddings,
        rope_parameters=getattr(tc, "rope_parameters", None), bos_token_id=tc.bos_token_id,
        eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id, tie_word_embeddings=True,
        rms_norm_eps=tc.rms_norm_eps,
    )
    draft = LlamaForCausalLM(config)
    E = target.get_input_embeddings().weight.detach().float()  # V x D
    _, vecs = torch.linalg.eigh(E.T @ E)  # ascending eigenvalues
    proj = E @ vecs[:, -hidden:].flip(-1)  # V x hidden
    draft.get_input_embeddings().weight.data.copy_(proj * (0.02 / proj.std()))
    return draft


def grow_layers(draft, layers: int) -> None:
    """Deepens a drafter in place to `layers` blocks. Each new block copies the last one with its output projections
    zeroed, so it adds nothing to the residual stream: the deeper drafter starts as the one it grew from."""
    blocks = draft.model.layers
    if layers < len(blocks):
        raise TevvizError(f"--layers {layers} is fewer than the {len(blocks)} layers of the drafter to go on from")
    for i in range(len(blocks), layers):
        block = copy.deepcopy(blocks[-1])
        block.self_attn.layer_idx = i
        block.self_attn.o_proj.weight.data.zero_()
        block.mlp.down_proj.weight.data.zero_()
        blocks.append(block)
    draft.config.num_hidden_layers = layers


def soft_loss(draft, batch: list[dict]) -> torch.Tensor:
    """Cross-entropy of the drafter against the target's renormalised top-k distribution at the answer positions."""
    seqs = [ex["prompt"] + ex["answer"] for ex in batch]
    T = max(map(len, seqs))
    pad = draft.config.pad_token_id or 0
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    mask = torch.zeros(len(seqs), T, dtype=torch.long)
    rows, cols, tgt_ids, tgt_logp = [], [], [], []
    for b, (ex, s) in enumerate(zip(batch, seqs)):
        ids[b, :len(s)] = torch.tensor(s)
        mask[b, :len(s)] = 1
        n, p = len(ex["answer"]), len(ex["prompt"])
        rows.append(torch.full((n,), b))
        cols.append(torch.arange(p - 1, p - 1 + n))  # the position that predicts answer token j
        tgt_ids.append(ex["ids"].long())
        tgt_logp.append(ex["logp"].float())
    rows, cols = torch.cat(rows), torch.cat(cols)
    hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state[rows, cols]  # N x d
    logq = torch.log_softmax(draft.lm_head(hidden).float(), -1)  # N x V
    p = torch.softmax(torch.cat(tgt_logp), -1)  # renormalised over the top-k
    return -(p * logq.gather(-1, torch.cat(tgt_ids))).sum(-1).mean()


@torch.no_grad()
def agreement(draft, examples: list[dict]) -> dict:
    """Argmax agreement with the target and sum of min(p, q) over the target's top-k, on held-out answers."""
    agree, overlap, n = 0.0, 0.0, 0
    for ex in examples:
        s = torch.tensor([ex["prompt"] + ex["answer"]])
        p0 = len(ex["prompt"])
        q = torch.softmax(draft(input_ids=s).logits[0, p0 - 1:p0 - 1 + len(ex["answer"])].float(), -1)
        ids = ex["ids"].long()
        agree += (q.argmax(-1) == ids[:, 0]).sum().item()
        overlap += torch.minimum(ex["logp"].float().exp(), q.gather(-1, ids)).sum().item()
        n += len(ex["answer"])
    return {"argmax_agreement": agree / max(n, 1), "sum_min_pq_topk": overlap / max(n, 1), "positions": n}


def train(draft, data: list[dict], held: list[dict], steps: int, batch: int, lr: float, seed: int) -> list[dict]:
    """AdamW with warm-up and cosine decay; logs loss and held-out agreement."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(draft.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    warmup, log, order = max(1, steps // 30), [], []
    draft.train()
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        for g in opt.param_groups:
            g["lr"] = lr * lr_scale(step, steps, warmup, 0.05)
        if len(order) < batch:
            order = list(range(len(data)))
            rng.shuffle(order)
        idx, order = order[:batch], order[batch:]
        loss = soft_loss(draft, [data[i] for i in idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if step % max(1, steps // 10) == 0 or step == steps:
            draft.eval()
            ev = agreement(draft, held[:48])
            draft.train()
            elapsed = time.perf_counter() - t0
            log.append({"step": step, "loss": loss.item(), "elapsed_s": elapsed, **ev})
            _say(f"  train: step {step}/{steps} loss {loss.item():.3f} held-out agreement {ev['argmax_agreement']:.3f} "
                 f"sum min(p,q) {ev['sum_min_pq_topk']:.3f}  {elapsed / 60:.1f} min, "
                 f"ETA {elapsed / step * (steps - step) / 60:.1f} min")
    draft.eval()
    return log


def save_drafter(draft, tokenizer_dir: Path, out: Path) -> None:
    """bfloat16 weights, float32 compute, the target's tokenizer files copied byte for byte."""
    state = {k: v.to(torch.bfloat16) for k, v in draft.state_dict().items()
             if not (k == "lm_head.weight" and draft.config.tie_word_embeddings)}
    draft.save_pretrained(out, state_dict=state)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (tokenizer_dir / name).is_file():
            shutil.copyfile(tokenizer_dir / name, out / name)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="tevviz pair train-drafter", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="a fetched pair (smollm2)")
    ap.add_argument("--out", type=Path, default=None,
                    help="drafter folder (default: the pair's first drafter in assets/)")
    ap.add_argument("--work", type=Path, default=Path("drafter-work"), help="folder for the resumable stages")
    ap.add_argument("--prompts", type=int, default=1024,
                    help="training answers asked of the target (more than a finished data stage holds: the new "
                         "ones are appended; more than the training prompts: prompts are sampled again)")
    ap.add_argument("--held-prompts", type=int, default=96)
    ap.add_argument("--new-tokens", type=int, default=48, help="answer tokens per prompt")
    ap.add_argument("--gen-batch", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=32, help="target log-probabilities kept per position")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=None,
                    help="decoder blocks (default 3; with --init, more than the drafter has grows it: see grow_layers)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--init", type=Path, default=None,
                    help="go on training this drafter folder (e.g. the shipped one) instead of a fresh one")
    ap.add_argument("--data-only", action="store_true", help="stop after the data stage")
    ap.add_argument("--save-every", type=int, default=256, help="training answers per saved piece of the data stage")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    return ap.parse_args(argv)


def split_prompts(seed: int, n_held: int) -> tuple[list[str], list[str]]:
    """The chat prompts' training prompts and the first `n_held` held-out ones, each list shuffled by `seed`."""
    from .chat_prompts import make_chat_prompts

    rows = make_chat_prompts(seed=seed)
    rng = random.Random(seed)
    train_prompts = [r["prompt"] for r in rows if r["split"] == "train"]
    held_prompts = [r["prompt"] for r in rows if r["split"] == "eval"]
    rng.shuffle(train_prompts)
    rng.shuffle(held_prompts)
    return train_prompts, held_prompts[:n_held]


def data_stage(args, target, tok, train_prompts: list[str], held_prompts: list[str]) -> dict:
    """The target's answers ({"train", "held", "wall_s"}) in `args.work`/data.pt: reused, or extended to
    `args.prompts` training answers in pieces, each saved when done, so a stopped data stage resumes where it was."""
    data_path = args.work / "data.pt"

    def save() -> None:
        torch.save(blob, data_path.with_suffix(".tmp"))
        data_path.with_suffix(".tmp").replace(data_path)  # a stopped run never leaves half a data file

    if data_path.is_file():
        blob = torch.load(data_path)
        _say(f"data: reusing {data_path} ({len(blob['train'])} training answers)")
    else:
        t0 = time.perf_counter()
        blob = {"train": [],
                "held": generate_examples(target, tok, held_prompts[::2], False, args.new_tokens, args.gen_batch,
                                          args.top_k, args.seed + 1)
                + generate_examples(target, tok, held_prompts[1::2], True, args.new_tokens, args.gen_batch,
                                    args.top_k, args.seed + 1),
                "wall_s": time.perf_counter() - t0}
        save()
    plan = answer_plan(len(train_prompts), len(blob["train"]), args.prompts)
    for start in range(0, len(plan), args.save_every):
        piece, t0 = plan[start:start + args.save_every], time.perf_counter()
        seed = args.seed + len(blob["train"])  # a fresh seed per piece: prompts answered again draw new samples
        for sampled in (False, True):
            prompts = [train_prompts[j] for j, s in piece if s == sampled]
            if prompts:
                blob["train"] += generate_examples(target, tok, prompts, sampled, args.new_tokens, args.gen_batch,
                                                   args.top_k, seed)
        blob["wall_s"] += time.perf_counter() - t0
        save()
    return blob


def drafter_to_train(args, target, tok, target_dir: Path):
    """--init's drafter (checked as every drafter is, grown to --layers), or a fresh one of the given shape."""
    from ..engine.load.models import check_vocabularies, load_model, load_tokenizer

    torch.manual_seed(args.seed)
    if args.init is None:
        return make_drafter(target, args.hidden, args.layers or 3, args.heads, args.intermediate)
    # The checks every drafter passes (clear load errors, the target's vocabulary and special tokens).
    check_vocabularies(tok, load_tokenizer(str(args.init), "draft"), str(target_dir), str(args.init))
    draft = load_model(str(args.init), "draft", dtype="float32", device="cpu").requires_grad_(True)
    if args.layers is not None:
        grow_layers(draft, args.layers)
    return draft


def main(argv: list[str] | None = None) -> int:
    from ..engine.load.pairs import assets_dir, named_pair

    args = parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pair = named_pair(args.name)
    if not pair.fetched:
        raise TevvizError(f"{args.name} is not a fetched pair; "
                          "its drafter is made by `tevviz pair train-target stdlib`")
    target_dir = pair.target_path()
    if not (target_dir / "config.json").is_file():
        raise TevvizError(f"fetch the target first: tevviz pair fetch {args.name}")
    out = args.out or assets_dir() / "models" / pair.drafters[0]
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    args.work.mkdir(parents=True, exist_ok=True)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(target_dir)

    blob = data_stage(args, target, tok, *split_prompts(args.seed, args.held_prompts))
    n_tokens = sum(len(ex["answer"]) for ex in blob["train"])
    _say(f"data: {len(blob['train'])} training answers ({n_tokens} tokens), {len(blob['held'])} held-out answers")
    if args.data_only:
        return 0

    draft = drafter_to_train(args, target, tok, target_dir)
    n_params = sum(p.numel() for p in draft.parameters())
    _say(f"drafter: {n_params / 1e6:.2f} M parameters")
    before = agreement(draft.eval(), blob["held"])
    t0 = time.perf_counter()
    log = train(draft, blob["train"], blob["held"], args.steps, args.batch, args.lr, args.seed)
    train_s = time.perf_counter() - t0
    after = agreement(draft, blob["held"])
    save_drafter(draft, target_dir, out)
    card = {"pair": args.name, "target": str(target_dir), "parameters": n_params,
            "args": {k: str(v) for k, v in vars(args).items()}, "train_answers": len(blob["train"]),
            "train_tokens": n_tokens, "held_answers": len(blob["held"]), "data_wall_s": blob["wall_s"],
            "train_wall_s": train_s, "total_wall_s": time.perf_counter() - t_start,
            "held_out_at_init": before, "held_out": after}
    (out / "training_log.json").write_text(json.dumps({"card": card, "log": log}, indent=1) + "\n")
    _say(json.dumps(card, indent=1))
    return 0
