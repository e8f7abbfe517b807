"""``fan_out``: the jobs' results in their order, on an executor or in order, with progress after each."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor


def square(x: int) -> int:
    return x * x


def test_results_keep_the_jobs_order_on_an_executor_and_progress_counts_each() -> None:
    from sim.numeric.fanout import fan_out

    seen: list[tuple[int, int]] = []
    jobs = list(range(130))  # 130 // 64 = 2 jobs a chunk
    with ThreadPoolExecutor(max_workers=3) as pool:
        assert fan_out(square, jobs, pool, lambda done, total: seen.append((done, total))) == [x * x for x in jobs]
    assert seen == [(i, 130) for i in range(1, 131)]
    assert fan_out(square, [3, 1, 2]) == [9, 1, 4]
