"""The SmolLM2 drafter recipe's data stage on a tiny model: batched answers equal `generate`, the answer plan
extends a finished run without repeating or reordering it."""

from __future__ import annotations

import pytest
import torch
from conftest import EOS, greedy_generate, random_prompts, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from tevviz.engine.errors import TevvizError
from tevviz.recipes.drafter import answer_batch, answer_plan, grow_layers


def _left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), EOS)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    return ids, mask


def test_batched_greedy_answers_equal_generate_and_keep_the_targets_top_k(one_thread):
    target = tiny_model("llama", seed=3, scale=1.0)  # flat enough that EOS rarely ends an answer early
    prompts = random_prompts(5, seed=11, lo=2, hi=9)
    ids, mask = _left_padded(prompts)
    answers, logp, top = answer_batch(target, ids, mask, sample=False, new_tokens=12, k=4, eos=EOS,
                                      gen=torch.Generator().manual_seed(0))
    for b, p in enumerate(prompts):
        ref = greedy_generate(target, p, max_new_tokens=12)
        got = answers[b].tolist()
        n = got.index(EOS) + 1 if EOS in got else len(got)
        assert got[:n] == ref[:n], f"prompt {b}"
        # The kept log-probabilities are the target's own at each answer position.
        with torch.no_grad():
            full = torch.log_softmax(target(torch.tensor([p + ref[:n]])).logits[0, len(p) - 1:-1].float(), -1)
        ref_v, ref_i = full.topk(4, -1)
        assert torch.equal(top[b, :n].long(), ref_i[:n])
        assert torch.allclose(logp[b, :n].float(), ref_v[:n], atol=2e-3)  # stored in float16


def test_the_first_run_keeps_its_split():
    # The documented first run (1,536 answers of 2,515 prompts): first half greedy, second half sampled.
    plan = answer_plan(2515, 0, 1536)
    assert plan == [(j, False) for j in range(768)] + [(j, True) for j in range(768, 1536)]


@settings(max_examples=60, deadline=None)
@given(n_train=st.integers(1, 40), cuts=st.lists(st.integers(0, 100), min_size=1, max_size=4))
def test_extending_a_run_answers_each_new_index_once(n_train, cuts):
    """Runs of growing --prompts together answer answers 0..total-1 once each; a prompt is answered greedily at
    most once; answers past the training prompts revisit them at T = 1."""
    totals = sorted(cuts)
    done, answered = 0, []
    for total in totals:
        plan = answer_plan(n_train, done, total)
        assert len(plan) == max(0, total - done)
        answered += plan
        done = max(done, total)
    greedy = [j for j, sampled in answered if not sampled]
    assert len(greedy) == len(set(greedy))
    first_pass = sorted(j for j, _ in answered[:min(done, n_train)])
    assert first_pass == list(range(min(done, n_train)))
    assert all(sampled and 0 <= j < n_train for j, sampled in answered[n_train:])


def test_a_grown_drafter_starts_as_the_one_it_grew_from_and_trains_its_new_blocks(tmp_path):
    from transformers import AutoModelForCausalLM

    draft = tiny_model("llama", seed=5, layers=2)
    ids = torch.tensor([random_prompts(1, seed=2, lo=12, hi=13)[0]])
    with torch.no_grad():
        before = draft(ids).logits
    grow_layers(draft, 4)
    assert len(draft.model.layers) == 4 and draft.config.num_hidden_layers == 4
    with torch.no_grad():
        assert torch.equal(draft(ids).logits, before)
        # Decoding with a KV cache reaches every block (each knows its own cache slot).
        out = draft(ids[:, :-1], use_cache=True)
        step = draft(ids[:, -1:], cache=out.past_key_values).logits[0, -1]
    assert torch.allclose(step, before[0, -1], atol=1e-5)
    assert out.past_key_values.get_seq_length() == ids.shape[1] and len(out.past_key_values.layers) == 4
    # Saved and loaded as a plain 4-layer Llama, it computes the same.
    draft.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.allclose(again(ids).logits, before, atol=1e-5)
    # The new blocks learn: one gradient step moves their zeroed output projections.
    draft.requires_grad_(True).train()
    torch.nn.functional.cross_entropy(draft(ids[:, :-1]).logits[0], ids[0, 1:]).backward()
    assert draft.model.layers[3].mlp.down_proj.weight.grad.abs().sum() > 0
    assert draft.model.layers[2].self_attn.o_proj.weight.grad.abs().sum() > 0
    with pytest.raises(TevvizError, match="fewer than"):
        grow_layers(draft, 3)
