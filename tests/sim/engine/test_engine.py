"""Engine behaviours beyond the seed: the disk tier, shared prefixes, unfull chunks, pass orders."""

from __future__ import annotations

from sim.simulation.run import simulate
from sim.workloads.requests import pass_orders
from sim.workloads.scenario import Scenario

# 4 documents of 512 tokens + 8-token questions: 520-token prompts = 33 blocks (the last
# partial), 2 full 256-token chunks of document only. The GPU's 39 usable blocks hold one prompt.
BASE = Scenario(docs=4, doc_tokens=512, question_tokens=8, gpu_tokens=16 * 40, cpu_gb=None, cpu_tokens=512, passes="forward,forward")


def _requests(result: dict, run: str, pass_: int) -> list[dict]:
    return [r for r in next(x for x in result["runs"] if x["name"] == run)["requests"] if r["pass"] == pass_]


def test_disk_tier_serves_what_the_cpu_tier_lost() -> None:
    # The CPU holds 2 chunks (one document), the disk all 4 documents. Pass 2 starts with
    # the CPU holding doc 3 only; doc 0 comes from disk and its promotion to CPU evicts
    # doc 3, and so on: every document loads its 512 tokens from disk and computes 8.
    result = simulate(BASE.replace(disk_tokens=4 * 512))
    pass2 = _requests(result, "gpu+cpu+disk", 2)
    assert [r["disk_hit_tokens"] for r in pass2] == [512] * 4
    assert all(r["gpu_hit_tokens"] == 0 and r["cpu_hit_tokens"] == 0 for r in pass2)
    assert [r["computed_tokens"] for r in pass2] == [8] * 4
    # Without the disk, the small CPU tier serves nothing of pass 2 (LRU on a cyclic scan).
    assert sum(r["cpu_hit_tokens"] for r in _requests(result, "gpu+cpu", 2)) == 0


def test_a_shared_system_prompt_hits_on_the_gpu_for_every_document() -> None:
    # 64 shared tokens = 4 blocks; each prompt touches them, so LRU keeps them.
    scenario = BASE.replace(shared_prefix_tokens=64, gpu_tokens=16 * 60, passes="forward")
    gpu = _requests(simulate(scenario), "gpu", 1)
    assert [r["gpu_hit_tokens"] for r in gpu] == [0, 64, 64, 64]


def test_save_unfull_chunk_stores_the_tail_and_serves_all_but_the_last_token() -> None:
    # Prompts of 512 + 8 = 520 tokens: two full chunks + an 8-token partial one.
    scenario = BASE.replace(cpu_tokens=4 * 520)
    full_only = _requests(simulate(scenario), "gpu+cpu", 2)
    assert [r["cpu_hit_tokens"] for r in full_only] == [512] * 4
    # The question differs per pass, so a partial chunk can't be reused by the next
    # pass; within a pass it could only help a repeated prompt: same hits here.
    unfull = _requests(simulate(scenario.replace(save_unfull_chunk=True)), "gpu+cpu", 2)
    assert [r["cpu_hit_tokens"] for r in unfull] == [512] * 4
    repeat = scenario.replace(save_unfull_chunk=True, passes="0/0", docs=1)
    second = _requests(simulate(repeat), "gpu+cpu", 1)[1]
    # The same prompt twice: the GPU hits floor(519/16) = 32 blocks (512 tokens); the CPU
    # then adds the stored partial chunk up to the last token: 519 - 512 = 7.
    assert second["gpu_hit_tokens"] == 512
    assert second["cpu_hit_tokens"] == 7


def test_pass_orders() -> None:
    scenario = Scenario(docs=6, passes="forward,reverse,random@3,random@3,zipf@1,2/5")
    forward, reverse, r1, r2, zipf, explicit = pass_orders(scenario)
    assert forward == [0, 1, 2, 3, 4, 5] and reverse == [5, 4, 3, 2, 1, 0]
    assert sorted(r1) == forward and r1 != forward
    # The same seed in a different pass position gives a different shuffle.
    assert r1 != r2
    assert len(zipf) == 6 and all(0 <= d < 6 for d in zipf)
    assert explicit == [2, 5]
    assert pass_orders(scenario) == pass_orders(Scenario(docs=6, passes="forward,reverse,random@3,random@3,zipf@1,2/5"))


def test_the_result_names_passes_so_they_can_be_given_back() -> None:
    scenario = Scenario(docs=6, passes="forward,random@3,zipf@1,2/5,tile*2,random*2@4:3:1")
    summary = simulate(scenario.replace(docs=2, passes="forward,random@3"))["scenario"]
    assert summary["passes"] == "forward,random@3"
    again = Scenario(docs=6, passes=",".join(p.text for p in scenario.passes))
    assert again.passes == scenario.passes
