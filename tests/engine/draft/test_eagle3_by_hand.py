"""An EAGLE-3 head's step written out by hand from its weights alone (docs/eagle3.md), compared with every depth-1
and depth-2 node of an `eagle` tree, for a plain head, a `norm_output` head and a `norm_before_residual` head: the
state a deeper level reads (normed or not) and the residual the layer starts from are where these heads differ."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import VOCAB, tiny_model
from test_eagle3_loading import head_config, head_tensors, write_head, write_target

from tevviz.engine import DecodeConfig, DecodeSession, SamplingConfig
from tevviz.engine.draft.eagle_tree import eagle_builder
from tevviz.engine.load.models import load_pair

pytestmark = pytest.mark.usefixtures("one_thread")

IDS = (1, 2, 3)  # hidden_states indices of a 3-layer target
VARIANTS = {"plain": {}, "norm_output": {"norm_output": True}, "norm_before_residual": {"norm_before_residual": True}}
CONTEXT = [5, 17, 3, 40, 9]
P = "midlayer."


def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x):
    """Llama's RoPE (theta 10000) on (heads, n, d) at positions 0..n-1, the halves rotated."""
    n, d = x.shape[-2], x.shape[-1]
    angle = torch.arange(n).float()[:, None] * 10000.0 ** (-torch.arange(0, d, 2).float() / d)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()], dim=-1)


def layer(w, flags, h_in, emb):
    """The head's one decoder layer over rows (h_in, embedding), causal, 4 query and 2 key/value heads."""
    n = len(h_in)
    residual = rms(h_in, w[P + "hidden_norm.weight"]) if flags.get("norm_before_residual") else h_in
    x = torch.cat([rms(emb, w[P + "input_layernorm.weight"]), rms(h_in, w[P + "hidden_norm.weight"])], dim=-1)
    split = lambda t, heads: t.view(n, heads, -1).transpose(0, 1)
    q = rope(split(x @ w[P + "self_attn.q_proj.weight"].T, 4))
    k = rope(split(x @ w[P + "self_attn.k_proj.weight"].T, 2)).repeat_interleave(2, 0)
    v = split(x @ w[P + "self_attn.v_proj.weight"].T, 2).repeat_interleave(2, 0)
    scores = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(~torch.ones(n, n).bool().tril(), -math.inf)
    h = residual + (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(n, -1) @ w[P + "self_attn.o_proj.weight"].T
    m = rms(h, w[P + "post_attention_layernorm.weight"])
    return h + (F.silu(m @ w[P + "mlp.gate_proj.weight"].T) * (m @ w[P + "mlp.up_proj.weight"].T)) \
        @ w[P + "mlp.down_proj.weight"].T


@torch.no_grad()
def hand_law(target, w, flags, path: tuple[int, ...]) -> torch.Tensor:
    """q(. | CONTEXT + path) over the target's vocabulary: the committed pairs read fc(target states); each drafted
    token reads the state of the row before it (norm(h) where the head says norm_output, else h)."""
    hs = target(input_ids=torch.tensor([CONTEXT[:-1]]), output_hidden_states=True).hidden_states
    h_in = torch.cat([hs[i][0] for i in IDS], dim=-1) @ w["fc.weight"].T
    tokens = list(CONTEXT[1:])
    table = target.get_input_embeddings().weight
    for token in path:  # rows are causal, so the committed rows' h do not change as drafted rows join
        h = layer(w, flags, h_in, table[torch.tensor(tokens)])
        fed = rms(h[-1:], w["norm.weight"]) if flags.get("norm_output") else h[-1:]
        h_in, tokens = torch.cat([h_in, fed]), tokens + [token]
    h = layer(w, flags, h_in, table[torch.tensor(tokens)])
    law = torch.zeros(VOCAB)
    law[torch.arange(len(w["d2t"])) + w["d2t"]] = torch.softmax(rms(h[-1], w["norm.weight"]) @ w["lm_head.weight"].T,
                                                                 -1)
    return law


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return write_target(tmp_path_factory.mktemp("byhand") / "target", tiny_model("llama", 1, layers=3))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_depth_1_and_2_node_of_an_eagle_tree_is_the_heads_step_by_hand(target_dir, tmp_path, variant):
    flags = VARIANTS[variant]
    tensors = head_tensors(seed=3)
    pair = load_pair(str(target_dir), str(write_head(tmp_path / "head", head_config("vllm", ids=IDS, **flags),
                                                     tensors)), device="cpu")
    assert all(pair.draft.head.flag(f) == flags.get(f, False) for f in ("norm_output", "norm_before_residual"))
    w = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}
    cfg = DecodeConfig(sampling=SamplingConfig(temperature=0.0), max_new_tokens=4, stop_on_eos=False,
                       builder=eagle_builder(total_tokens=13, depth=1, top_k=3))
    r = DecodeSession(pair, CONTEXT, cfg).step()
    assert sorted(r.depths).count(1) == 3 and sorted(r.depths).count(2) == 9  # the whole 3 x 3 tree
    root_law = hand_law(pair.target, w, flags, ())
    assert sorted(t for t, d in zip(r.tokens, r.depths) if d == 1) == sorted(torch.topk(root_law, 3).indices.tolist())
    for v in range(1, len(r.tokens)):
        parent = r.parents[v]
        path = () if parent == 0 else (r.tokens[parent],)
        law = hand_law(pair.target, w, flags, path)
        # a node's logprob is its own conditional log q (its parent's law at its token)
        assert math.exp(r.draft_logprobs[v]) == pytest.approx(float(law[r.tokens[v]]), abs=1e-5), \
            f"{variant}: node {v} (depth {r.depths[v]}, path {path + (r.tokens[v],)})"
        if r.depths[v] == 2:
            siblings = sorted(r.tokens[u] for u in range(len(r.tokens)) if r.parents[u] == parent)
            assert siblings == sorted(torch.topk(law, 3).indices.tolist()), f"{variant}: children of {path}"
