"""Tiny model pairs built from configs in the test process (no network, no shipped weights)."""

from __future__ import annotations

import contextlib
import copy
import os
import socket

import pytest
import torch

from tevviz.engine.core.kv import new_cache
from tevviz.engine.load.models import ModelPair

# Tiny models gain nothing from intra-op threads, and oversubscribed threads on a busy 2-core
# machine slow every op down by an order of magnitude.
torch.set_num_threads(1)
# The tests take the few-row path wherever a model agrees with it (the path that needs checking; the model's own
# layers are the model itself), with no timing probe per tiny model and nothing written to the user's cache; the
# probe and its choice have tests of their own (tests/test_row_paths.py). A subprocess inherits it.
os.environ.setdefault("TEVVIZ_ROW_PATHS", "few")
# Likewise the thread count: one fewer than the cores, unmeasured (tests/engine/decode/test_thread_choice.py).
os.environ.setdefault("TEVVIZ_THREADS", "spare")

VOCAB = 96
EOS = VOCAB - 1
# TEVVIZ_TEST_DEVICE=cuda runs the tiny models on a GPU (the exactness suites' device check); CPU otherwise.
DEVICE = torch.device(os.environ.get("TEVVIZ_TEST_DEVICE", "cpu"))


def word_tokenizer(vocab: int = VOCAB):
    """A word-level tokenizer over tokens 't0'..; the last one is EOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab - 1)} | {"<eos>": vocab - 1}
    tok = Tokenizer(models.WordLevel(words, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", bos_token="<eos>", pad_token="<eos>")


def tiny_config(family: str, layers: int = 2, attn: str = "sdpa"):
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    common = {"vocab_size": VOCAB, "eos_token_id": EOS, "bos_token_id": EOS, "pad_token_id": EOS}
    if family == "llama":
        cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=512, **common)
    elif family == "qwen2":
        cfg = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=512, **common)
    elif family == "gpt2":
        cfg = GPT2Config(n_embd=32, n_layer=layers, n_head=4, n_positions=512, **common)
    else:
        raise ValueError(family)
    cfg._attn_implementation = attn
    return cfg


def tiny_model(family: str, seed: int, layers: int = 2, attn: str = "sdpa", scale: float = 6.0):
    """A random causal LM whose output logits are sharpened, so that drafts get accepted deeply."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, layers, attn))
    with torch.no_grad():
        head = model.get_output_embeddings()
        if head.weight is model.get_input_embeddings().weight:
            model.config.tie_word_embeddings = False
            head.weight = torch.nn.Parameter(head.weight.clone())
        head.weight.mul_(scale)
    return model.eval().requires_grad_(False).to(DEVICE)


def perturbed(model, seed: int, noise: float = 0.3):
    """A draft close to `model`: its weights plus relative Gaussian noise."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            # drawn on the CPU, so a draft is the same on every device
            p.add_(torch.randn(p.shape, generator=g).to(p.device) * noise * p.std().nan_to_num(0.0))
    return draft


def tiny_pair(family: str = "llama", seed: int = 0, attn: str = "sdpa", noise: float = 0.3) -> ModelPair:
    target = tiny_model(family, seed, layers=2, attn=attn)
    draft = perturbed(target, seed + 1, noise)
    return ModelPair(target, draft, word_tokenizer(), f"tiny-{family}", f"tiny-{family}-draft")


# The suite runs on pytest-xdist workers (pyproject's addopts). A file's tests share one worker, so module-level
# models, apps and references load once, except in these files of many independent slow tests on tiny models, whose
# tests are spread over the workers one by one. The files with the longest runs start first, so none is the tail.
SPREAD = {"test_exactness.py", "test_laws.py"}
FIRST = ("test_real_pair.py", "test_embedded_pair.py", "test_auto_budget.py", "test_model_thread.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: a file keeps its own order


@pytest.fixture(scope="session")
def llama_pair():
    return tiny_pair("llama")


@pytest.fixture(scope="module")
def one_thread():
    """Run a module on one CPU thread: tiny models are dominated by thread hand-offs on a shared machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def random_prompts(count: int, seed: int, lo: int = 1, hi: int = 12, vocab: int = EOS) -> list[list[int]]:
    """`count` prompts of random length in [lo, hi] over tokens [0, vocab) (EOS excluded by default)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (count,), generator=g).tolist()
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


@torch.no_grad()
def greedy_generate(model, prompt: list[int], max_new_tokens: int = 64, stop_on_eos: bool = False) -> list[int]:
    """The new tokens of `model.generate(..., do_sample=False)`; without EOS stopping unless asked."""
    ids = torch.tensor([prompt], device=model.device)
    kw = {"eos_token_id": EOS, "pad_token_id": EOS} if stop_on_eos else {"eos_token_id": None, "pad_token_id": 0}
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False, **kw)
    return out[0, len(prompt):].tolist()


@torch.no_grad()
def fresh_cache(model, tokens: list[int]):
    """A cache filled by one plain causal forward of `tokens`."""
    cache = new_cache(model)
    if tokens:
        model(input_ids=torch.tensor([tokens], device=model.device), cache=cache, use_cache=True)
    return cache


def assert_same_cache(cache, ref, length: int, what: str) -> None:
    assert cache.get_seq_length() == length, f"{what} cache holds {cache.get_seq_length()} entries, expected {length}"
    if length == 0:
        return
    for i, (a, b) in enumerate(zip(cache.layers, ref.layers)):
        for name in ("keys", "values"):
            x, y = getattr(a, name)[..., :length, :], getattr(b, name)
            assert x.shape == y.shape, f"{what} layer {i} {name}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
            # float32 rounding grows with the entries' size (a 30-layer model's keys reach tens): relative to scale.
            err, scale = (x - y).abs().max().item(), max(1.0, y.abs().max().item())
            assert err <= 1e-5 * scale, (f"{what} layer {i} {name} differ from a fresh prefill by {err:.3g} "
                                         f"(scale {scale:.3g})")


def assert_caches_in_line(pair, s) -> None:
    """Target cache = prefill of committed tokens minus the root; draft cache = committed minus pending."""
    toks = s.tokens
    assert_same_cache(s.target_cache, fresh_cache(pair.target, toks[:-1]), len(toks) - 1,
                      f"round {len(s.rounds)}: target")
    pending = s.drafter.pending
    n_draft = len(toks) - len(pending)
    assert 1 <= len(pending) <= len(toks)
    assert pending == toks[n_draft:], "pending tokens must be the last committed tokens"
    assert_same_cache(s.drafter.cache, fresh_cache(pair.draft, toks[:n_draft]), n_draft,
                      f"round {len(s.rounds)}: draft")


def losing_cost_model(budget: int, depth: int):
    """An --budget auto cost model past its warm-up whose draft levels cost 2 s each: every drafted tree loses to a
    plain target step, so rounds go without a draft, with a probe after 1, 2, 4 ... of them (the first after 1)."""
    from tevviz.engine.cost.auto_budget import AutoBudget

    auto = AutoBudget(budget, depth)
    for n in (budget + 1, 3, 5):
        auto.observe(n, 2, {"draft": 4000.0, "target": 1.0 + 0.1 * n, "verify": 0.1, "other": 0.1},
                     C_p=0.5, predicted=1.0)
    # warm-up's plain step
    auto.observe(1, 0, {"draft": 0.0, "target": 1.1, "verify": 0.1, "other": 0.1}, C_p=0.0, predicted=0.0)
    auto.skip_left, auto.wait = 1, 2
    return auto


def scored_round(index, parents, P, exit_node, missing=None, optimal=None, stage_ms=None, sizing=None):
    """A hand-made scored round whose target flow is P: w(v) = P(v) less its children's P (rho = 1 where P is 0);
    tokens 10 + v, texts t<v>, a bonus token 99; committed = its block."""
    from tevviz.engine.records.records import RoundRecord

    n = len(parents)
    depths = [0] * n
    for v in range(1, n):
        depths[v] = depths[parents[v]] + 1
    w = [P[v] - sum(P[u] for u in range(n) if parents[u] == v) for v in range(n)]
    accepted = RoundRecord.unscored(index, "tev", list(range(n)), parents, depths, exit_node=exit_node).accepted
    return RoundRecord(
        index=index, verifier="tev", tokens=[10 + v for v in range(n)], texts=[f"t{v}" for v in range(n)],
        parents=parents, depths=depths, draft_logprobs=[0.0] * n, scores=[0.0] * n,
        p_edge=[1.0] + [P[v] / P[parents[v]] for v in range(1, n)], P=P,
        rho=[w[v] / P[v] if P[v] else 1.0 for v in range(n)], w=w, missing=missing or [[] for _ in range(n)],
        exit_node=exit_node, bonus_token=99, bonus_text="b", accepted=accepted,
        committed=[10 + v for v in accepted[1:]] + [99], C_p=sum(P[1:]), optimal=optimal, stage_ms=stage_ms or {},
        sizing=sizing)


@contextlib.contextmanager
def served(demo):
    """`demo` launched in this process on a free port of 127.0.0.1; yields its URL and closes it after."""
    from tevviz.app import launch_options

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **launch_options())
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def screenshot(page, path, full_page: bool = False) -> None:
    """A screenshot kept as an artifact for a person to look at, not asserted on: CSS animations stopped (a
    spinner redrawn every frame keeps a software-rendered page busy) and a long timeout, since a full page
    rendered beside the suite's other worker once took over the default 30 s."""
    page.screenshot(path=str(path), full_page=full_page, animations="disabled", timeout=120_000)


# ------------------------------------------------------------------------------ fixtures several test files share


@pytest.fixture
def no_models(monkeypatch):
    """Any model load fails the test: the command must stop before it."""
    from tevviz.engine.load.models import ModelSource

    def refuse(self):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(ModelSource, "load", refuse)


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    """A tiny Llama pair saved as two local HF folders."""
    root = tmp_path_factory.mktemp("pair")
    pair = tiny_pair("llama")
    for name, model in (("target", pair.target), ("draft", pair.draft)):
        model.save_pretrained(root / name)
        pair.tokenizer.save_pretrained(root / name)
    return root / "target", root / "draft", pair


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def saved_pair(request, tmp_path_factory):
    """A target of each family and a block drafter written in DFlash's layout, both as folders."""
    from _dflash import dflash_config, qwen3_target, write_drafter

    root = tmp_path_factory.mktemp(request.param)
    target = tiny_model("llama", 1, layers=3) if request.param == "llama" else qwen3_target(1)
    target.save_pretrained(root / "target")
    word_tokenizer().save_pretrained(root / "target")
    write_drafter(root / "draft", dflash_config())
    return str(root / "target"), str(root / "draft")


@pytest.fixture(scope="module")
def block_pair(saved_pair):
    """The `saved_pair` folders loaded: the target and its block drafter."""
    from tevviz.engine.load.models import load_pair

    return load_pair(*saved_pair)
