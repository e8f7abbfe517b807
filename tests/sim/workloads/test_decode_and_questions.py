"""Generated tokens grow a request's KV as vLLM's decode does; a question asked again can hit as the document does."""

from __future__ import annotations

from sim.simulation.run import simulate, stream
from sim.workloads.scenario import Scenario

# Prompts of 500 + 20 = 520 tokens: 32 full 16-token blocks and 8 tokens in a 33rd; vLLM recomputes the
# last token, so at most (520 - 1) // 16 = 32 blocks can hit. Block 31 holds the document's last 4
# tokens and the question's first 12: the block a question changes.
BASE = Scenario(docs=2, doc_tokens=500, question_tokens=20, gpu_tokens=21_520, cpu_gb=None, passes="forward,forward")


def _gpu(result: dict) -> list[dict]:
    return next(r for r in result["runs"] if r["name"] == "gpu")["requests"]


def test_a_question_asked_again_hits_the_block_it_shares_with_the_document() -> None:
    # The GPU holds both prompts. Pass 2, fresh questions: blocks 0-30 (the document's 496 full-block
    # tokens) hit, block 31 differs. Same questions: the whole prompt repeats and the hit stops only
    # at vLLM's last-token rule, 32 blocks = 512 tokens.
    fresh = [r["gpu_hit_tokens"] for r in _gpu(simulate(BASE)) if r["pass"] == 2]
    same = [r["gpu_hit_tokens"] for r in _gpu(simulate(BASE.replace(questions="same"))) if r["pass"] == 2]
    assert fresh == [31 * 16] * 2
    assert same == [32 * 16] * 2


def test_generated_tokens_fill_blocks_that_push_the_prompt_out() -> None:
    # 66 usable GPU blocks; docs read 0, 1, 0 in one pass (the same question: a repeat can hit 32 blocks).
    scenario = BASE.replace(gpu_tokens=16 * 67, passes="0/1/0")
    # One output token: a request holds 33 blocks (32 cached), so two fit and doc 0's repeat hits 512.
    assert [r["gpu_hit_tokens"] for r in _gpu(simulate(scenario))] == [0, 0, 512]
    # 100 output tokens: KV for 520 + 99 = 619 tokens, 39 blocks, 38 of them full and cached (the
    # generated ones hashed with the request's own tokens). After doc 0 the free queue is, front first:
    # its unhashed block 38, the 27 never used, then its cached blocks tail first (37..0). Doc 1 takes 39:
    # the 28 free ones and 11 evictions, doc 0's blocks 37..27. Doc 0's repeat hits blocks 0..26: 432.
    decoding = scenario.replace(output_tokens=100)
    assert [r["gpu_hit_tokens"] for r in _gpu(simulate(decoding))] == [0, 0, 27 * 16]
    stored = [e.tokens for e in stream(decoding) if e.kind == "store" and e.tier == "gpu" and e.seq == 0]
    assert stored == [38 * 16]


def test_question_lengths_per_document_change_which_blocks_hit() -> None:
    # Documents of 500 tokens with questions of 20, 4 and 28 tokens: prompts of 520, 504 and 528.
    # With fresh questions pass 2 hits each document's full blocks that hold no question, capped by
    # vLLM's last-token rule: doc 0 31 blocks (496, block 31 holds question tokens); doc 1, a 504-token
    # prompt, at most (504 - 1) // 16 = 31 blocks = 496; doc 2 31 blocks. With the same questions:
    # (520-1)//16 = 32, (504-1)//16 = 31, (528-1)//16 = 32 blocks.
    scenario = BASE.replace(docs=3, question_tokens="20,4,28")
    assert [r["prompt_tokens"] for r in _gpu(simulate(scenario)) if r["pass"] == 1] == [520, 504, 528]
    fresh = [r["gpu_hit_tokens"] for r in _gpu(simulate(scenario)) if r["pass"] == 2]
    same = [r["gpu_hit_tokens"] for r in _gpu(simulate(scenario.replace(questions="same"))) if r["pass"] == 2]
    assert fresh == [496, 496, 496]
    assert same == [512, 496, 512]


def test_question_lengths_are_one_or_one_per_document() -> None:
    assert Scenario(question_tokens="13").question_tokens == 13
    assert Scenario(docs=3, question_tokens="13,40,7").question_length(1) == 40
    for bad, needle in (("13,40", "one length per document: 10 lengths, got 2"), ("x", "whole numbers"), ("-1", "greater than or equal to 0")):
        try:
            Scenario(question_tokens=bad)
        except ValueError as exc:
            assert needle in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")
