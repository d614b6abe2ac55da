"""Train the embedded draft/target pair on the Python standard library (offline, CPU, seeded)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..engine.train.schedule import lr_scale

EOS = "<|endoftext|>"
VOCAB_SIZE = 4096
HOLDOUT_EVERY = 50  # every 50th file (sorted order) is held out for evaluation


@dataclass
class ModelShape:
    """Llama shape of one of the two models."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int


TARGET_SHAPE = ModelShape(hidden_size=256, intermediate_size=768, num_hidden_layers=12, num_attention_heads=4)
DRAFT_SHAPE = ModelShape(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2)


def stdlib_files() -> tuple[list[Path], list[Path]]:
    """Non-test .py files of this interpreter's stdlib, split into (train, held-out)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in root.rglob("*.py")
        if not {"test", "tests", "site-packages", "idle_test"} & set(p.relative_to(root).parts)
        and not p.name.startswith("test_")
    )
    held = [p for i, p in enumerate(files) if i % HOLDOUT_EVERY == 0]
    train = [p for i, p in enumerate(files) if i % HOLDOUT_EVERY != 0]
    return train, held


def _read(p: Path) -> str:
    return p.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(files: list[Path], out: Path):
    """Byte-level BPE with a 4096 vocabulary, saved as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((_read(p) for p in files), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS)
    fast.save_pretrained(out)
    return fast


def encode_corpus(tokenizer, files: list[Path]) -> torch.Tensor:
    """All files as one stream of token ids, each file followed by EOS."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for p in files:
        ids.extend(tokenizer(_read(p), add_special_tokens=False)["input_ids"])
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def make_model(shape: ModelShape, tokenizer, seq_len: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_attention_heads,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def batches(stream: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator):
    """Endless random windows of seq_len + 1 tokens."""
    n = stream.numel() - seq_len - 1
    while True:
        starts = torch.randint(0, n, (batch,), generator=gen)
        yield torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])


@torch.no_grad()
def evaluate(model, stream: torch.Tensor, seq_len: int, max_windows: int = 64) -> dict:
    """Held-out cross-entropy (nats/token) and top-1 accuracy on fixed contiguous windows."""
    model.eval()
    n = min(max_windows, (stream.numel() - 1) // seq_len)
    x = stream[: n * seq_len + 1]
    inp = x[:-1].view(n, seq_len)
    tgt = x[1:].view(n, seq_len)
    loss_sum, correct = 0.0, 0
    for i in range(0, n, 16):
        logits = model(input_ids=inp[i : i + 16]).logits.float()
        loss_sum += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt[i : i + 16].reshape(-1), reduction="sum"
        ).item()
        correct += (logits.argmax(-1) == tgt[i : i + 16]).sum().item()
    model.train()
    return {"cross_entropy": loss_sum / tgt.numel(), "top1": correct / tgt.numel()}


def train_model(
    name: str,
    model,
    train_stream: torch.Tensor,
    held_stream: torch.Tensor,
    steps: int,
    batch: int,
    seq_len: int,
    lr: float,
    seed: int,
    log: list,
    autocast: bool = False,
) -> dict:
    """AdamW with warm-up and cosine decay for a fixed number of steps; logs held-out loss."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, steps // 50)
    model.train()
    t0 = time.perf_counter()
    data = batches(train_stream, batch, seq_len, gen)
    eval_every = max(1, steps // 20)
    for step in range(1, steps + 1):
        for g in opt.param_groups:
            g["lr"] = lr * lr_scale(step, steps, warmup, 0.02)
        xb = next(data)
        # bfloat16 autocast runs the matmuls on the CPU's bf16 units (AMX/AVX-512) where present, about twice as fast.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=xb[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % eval_every == 0 or step == steps:
            elapsed = time.perf_counter() - t0
            ev = evaluate(model, held_stream, seq_len)
            eta = elapsed / step * (steps - step)
            entry = {"model": name, "step": step, "train_loss": loss.item(), "elapsed_s": elapsed, **ev}
            log.append(entry)
            print(
                f"[{name}] step {step}/{steps} loss {loss.item():.3f} held-out CE {ev['cross_entropy']:.3f} "
                f"top1 {ev['top1']:.3f} elapsed {elapsed / 60:.1f} min ETA {eta / 60:.1f} min",
                flush=True,
            )
    return {"steps": steps, "tokens_seen": steps * batch * seq_len, "wall_s": time.perf_counter() - t0}


@torch.no_grad()
def agreement(target, draft, stream: torch.Tensor, seq_len: int, n: int = 32) -> dict:
    """Argmax agreement and mean sum of min(p, q) of the two models on held-out windows."""
    x = stream[: n * seq_len].view(n, seq_len)
    p = torch.softmax(target(input_ids=x).logits.float(), -1)
    q = torch.softmax(draft(input_ids=x).logits.float(), -1)
    return {
        "argmax_agreement": (p.argmax(-1) == q.argmax(-1)).float().mean().item(),
        "mean_sum_min_pq": torch.minimum(p, q).sum(-1).mean().item(),
    }


def save_model(model, tokenizer, folder: Path, dtype: torch.dtype) -> None:
    """The model and tokenizer in `folder`: weights stored in `dtype` to fit the size budget; the config's dtype stays
    float32 so that dtype="auto" computes in float32 (bf16 values are exact in float32)."""
    state = {k: v.to(dtype) for k, v in model.state_dict().items()}
    model.save_pretrained(folder, state_dict=state)
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    tokenizer.save_pretrained(folder)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tevviz pair train-target stdlib", description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("assets/models"))
    ap.add_argument("--target-steps", type=int, default=1500)
    ap.add_argument("--draft-steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reuse-draft", action="store_true",
                    help="keep the draft (and its tokenizer) already in --out and train the target only")
    ap.add_argument("--init-target", type=Path, default=None,
                    help="continue from this target folder instead of a fresh initialisation (a second stage)")
    ap.add_argument("--target-lr", type=float, default=1.5e-3)
    ap.add_argument("--bf16-autocast", action="store_true", help="train under bfloat16 autocast (fast on AMX CPUs)")
    ap.add_argument("--save-dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()

    train_files, held_files = stdlib_files()
    print(f"corpus: {len(train_files)} train files, {len(held_files)} held-out files", flush=True)
    draft_dir = args.out / "tevviz-stdlib-draft"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.reuse_draft:
        tokenizer = AutoTokenizer.from_pretrained(draft_dir)
    else:
        with tempfile.TemporaryDirectory() as tok_dir:
            tokenizer = train_tokenizer(train_files, Path(tok_dir))
    train_stream = encode_corpus(tokenizer, train_files)
    held_stream = encode_corpus(tokenizer, held_files)
    print(f"tokens: {train_stream.numel()} train, {held_stream.numel()} held-out", flush=True)

    log: list[dict] = []
    card: dict = {
        "python": sys.version.split()[0],
        "train_files": len(train_files),
        "held_files": len(held_files),
        "train_tokens": train_stream.numel(),
        "held_tokens": held_stream.numel(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    models = {}
    plan = [("draft", DRAFT_SHAPE, args.draft_steps, 3e-3), ("target", TARGET_SHAPE, args.target_steps, args.target_lr)]
    if args.reuse_draft:
        plan = plan[1:]
        models["draft"] = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32).eval()
        card["draft"] = {"reused": str(draft_dir),
                         "held_out": evaluate(models["draft"], held_stream, args.seq_len, 256)}
    for name, shape, steps, lr in plan:
        torch.manual_seed(args.seed)
        if name == "target" and args.init_target is not None:
            model = AutoModelForCausalLM.from_pretrained(args.init_target, dtype=torch.float32)
        else:
            model = make_model(shape, tokenizer, args.seq_len)
        n_params = sum(p.numel() for p in model.parameters())
        print(f"[{name}] {n_params / 1e6:.2f} M parameters, shape {asdict(shape)}", flush=True)
        run = train_model(name, model, train_stream, held_stream, steps, args.batch, args.seq_len, lr, args.seed, log,
                          autocast=args.bf16_autocast)
        ev = evaluate(model, held_stream, args.seq_len, max_windows=256)
        card[name] = {"parameters": n_params, "shape": asdict(shape), "lr": lr, **run, "held_out": ev}
        models[name] = model
        save_model(model.eval(), tokenizer, args.out / f"tevviz-stdlib-{name}", getattr(torch, args.save_dtype))
    print(f"prompts: {write_prompts(args.out.parent / 'prompts.jsonl')} written", flush=True)
    card["agreement"] = agreement(models["target"], models["draft"], held_stream, args.seq_len)
    card["total_wall_s"] = time.perf_counter() - t_start
    (args.out / "training_log.json").write_text(json.dumps({"card": card, "log": log}, indent=2) + "\n")
    print(json.dumps(card, indent=2), flush=True)
    return 0



PROMPT_KINDS = (
    ("function head", re.compile(r"^\s*def \w+\(.*\):\s*$")),
    ("class body", re.compile(r"^class \w+.*:\s*$")),
    ("loop", re.compile(r"^\s+for .+ in .+:\s*$")),
    ("docstring", re.compile(r'^\s+"""\w.*[^"]$')),
)


def make_prompts(files: list[Path], per_file: int = 4, context_lines: int = 6, max_chars: int = 400) -> list[dict]:
    """Demo prompts cut from held-out files: a few lines of context ending where code should continue."""
    prompts = []
    for path in files:
        lines = _read(path).splitlines()
        taken: dict[str, int] = {}
        for i, line in enumerate(lines):
            for kind, pattern in PROMPT_KINDS:
                if taken.get(kind, 0) >= 1 or sum(taken.values()) >= per_file or not pattern.match(line):
                    continue
                start = max(0, i - context_lines)
                text = "\n".join(lines[start : i + 1]) + "\n"
                if len(text) > max_chars or not text.strip():
                    continue
                taken[kind] = taken.get(kind, 0) + 1
                name = line.strip().split("(")[0].split(":")[0][:40]
                prompts.append({"title": f"{path.stem}: {kind} ({name})", "kind": kind, "source": path.name,
                                "prompt": text})
    return prompts


def write_prompts(out: Path, limit: int = 48) -> int:
    """Write assets/prompts.jsonl: ids, titles and an even train/eval split (eval every other prompt)."""
    _, held = stdlib_files()
    prompts = make_prompts(held)[:limit]
    with out.open("w", encoding="utf-8") as f:
        for i, p in enumerate(prompts):
            f.write(json.dumps({"id": f"p{i:02d}", "split": "eval" if i % 2 else "train", **p}) + "\n")
    return len(prompts)


if __name__ == "__main__":
    raise SystemExit(main())
