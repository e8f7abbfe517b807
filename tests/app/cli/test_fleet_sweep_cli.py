"""``kvscope fleet --sweep``: one row per configuration, each the fleet run of that configuration; workers, Ray, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from tests.app.cli.test_fleet_cli import _trace  # three requests of two blocks; the second re-reads the first's

SMALL = ("--docs", "4", "--doc-tokens", "600", "--gpu-tokens", "2000", "--cpu-tokens", "2048")


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["fleet", "--no-save", *args], env=env)
    return result.exit_code, result.stdout, result.output


def sweep_json(*args: str) -> list[dict]:
    code, out, everything = run(*SMALL, "--sweep", *args, "--json")
    assert code == 0, everything
    return json.loads(out)["configurations"]


def test_each_row_is_the_fleet_run_of_its_configuration_in_the_sweeps_order() -> None:
    rows = sweep_json("--replicas", "1,2", "--router", "round-robin", "--router", "affinity", "--cpu-sizes", "0,4096t",
                      "--workers", "2")
    # Replicas outermost, then the sizes, routers innermost: 2 x 2 x 2 rows.
    assert [(r["replicas"], r["cpu_tokens"], r["router"]) for r in rows] == [
        (n, cpu, router) for n in (1, 2) for cpu in (None, 4096) for router in ("round-robin", "affinity")
    ]
    for r in rows:
        # The same configuration as one `kvscope fleet` run: its summary is the row's figures.
        cpu = ("--no-cpu",) if r["cpu_tokens"] is None else ("--cpu-tokens", str(r["cpu_tokens"]))
        args = ("--docs", "4", "--doc-tokens", "600", "--gpu-tokens", "2000", *cpu)
        code, out, everything = run(*args, "--replicas", str(r["replicas"]), "--router", r["router"], "--json")
        assert code == 0, everything
        summary = json.loads(out)["routers"][0]["summary"]
        assert {k: r[k] for k in ("hit_ratio", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "load_imbalance")} == {
            k: summary[k] for k in ("hit_ratio", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "load_imbalance")}
        assert r["gpu_tokens"] == 2000


def test_one_replica_is_the_same_fleet_behind_any_router_and_a_re_read_on_two_needs_affinity() -> None:
    rows = {(r["replicas"], r["router"]): r for r in sweep_json("--replicas", "1,2", "--router", "round-robin",
                                                               "--router", "affinity", "--cpu-sizes", "0")}
    # One replica: every request goes to it whatever the router, so the rows agree.
    one = [{k: v for k, v in rows[(1, name)].items() if k != "router"} for name in ("round-robin", "affinity")]
    assert one[0] == one[1]
    # Two replicas without a CPU tier: each re-read of a document lands, under affinity, on the replica that read it
    # (the same first blocks hash to the same replica), so affinity hits at least as much as round-robin.
    assert rows[(2, "affinity")]["hit_ratio"] >= rows[(2, "round-robin")]["hit_ratio"]


def test_the_table_has_one_row_per_configuration_and_progress_goes_to_stderr() -> None:
    code, out, everything = run(*SMALL, "--sweep", "--replicas", "1,2", "--router", "affinity", "--workers", "1")
    assert code == 0, everything
    lines = out.splitlines()
    assert lines[0].split() == ["replicas", "router", "GPU", "tokens", "CPU", "tokens", "hit", "ratio", "TTFT", "p50",
                                "ms", "p90", "ms", "p99", "ms", "imbalance"]
    assert len(lines) == 2 + 2  # head, rule, a row per replica count
    assert "fleet: 2/2 configurations simulated" in everything and "configurations simulated" not in out


@pytest.mark.parametrize(("args", "named"), [
    (("--replicas", "1,2"), "--replicas"),  # a list without --sweep
    (("--cpu-sizes", "0,8"), "--cpu-sizes"),  # a sweep flag without --sweep
    (("--sweep", "--replicas", "1,x"), "--replicas"),
    (("--sweep", "--replicas", "1,1"), "--replicas"),
    (("--sweep", "--replicas", "0,2"), "--replicas"),
    (("--sweep", "--replicas", "1", "--cpu-sizes", "8,-1"), "--cpu-sizes"),
    (("--sweep", "--replicas", "1", "--cpu-sizes", "8,big"), "--cpu-sizes"),
    (("--sweep", "--replicas", "1", "--router", "nope"), "--router"),
    (("--sweep", "--replicas", "1", "--gpu-sizes", "10t"), "--gpu-sizes"),  # below one prompt and the null block
])
def test_bad_input_names_the_flag(args: tuple[str, ...], named: str) -> None:
    code, _, everything = run(*SMALL, *args)
    assert code == 2 and named in everything and "validation error" not in everything, everything


def test_the_work_budget_is_checked_before_any_configuration_runs() -> None:
    code, _, everything = run(*SMALL, "--sweep", "--replicas", "1,2", env={"KVSCOPE_CLI_BUDGET": "work=1000"})
    assert code == 2 and "the limit here is 1,000 block steps" in everything, everything
    assert "configurations simulated" not in everything


def test_a_trace_sweeps_replicas_routers_and_gpu_sizes_in_tokens(tmp_path: Path) -> None:
    code, out, everything = run("--trace", str(_trace(tmp_path)), "--sweep", "--replicas", "1,2", "--gpu-sizes", "2048t,5632t",
                                "--router", "round-robin", "--router", "affinity", "--json")
    assert code == 0, everything
    rows = {(r["replicas"], r["gpu_tokens"], r["router"]): r["hit_ratio"] for r in json.loads(out)["configurations"]}
    # Three requests of two 512-token blocks at 0, 1,000 and 1,500 ms; the second re-reads the first's blocks.
    # 2,048 tokens is vLLM's null block and 3 of 512, the least a request of 1,024 + 2 tokens holds. The first request
    # has finished long before the second arrives a second later; the second finds its first block cached (vLLM
    # recomputes the last prompt token, so the second of its two full blocks is not a hit): 512 of the 3,072 prompt
    # tokens. On one replica every router gives that; on two, round-robin sends the re-read to replica 1, which
    # never read it (0), and affinity sends it where its first blocks went (512). A bigger GPU changes nothing.
    for gpu in (2048, 5632):
        assert rows[(1, gpu, "round-robin")] == rows[(1, gpu, "affinity")] == pytest.approx(512 / 3072, abs=1e-6)
        assert rows[(2, gpu, "round-robin")] == 0
        assert rows[(2, gpu, "affinity")] == pytest.approx(512 / 3072, abs=1e-6)


def test_a_trace_refuses_gib_and_a_gpu_size_below_one_request(tmp_path: Path) -> None:
    code, _, everything = run("--trace", str(_trace(tmp_path)), "--sweep", "--replicas", "1", "--gpu-sizes", "8")
    assert code == 2 and "--gpu-sizes" in everything and "a trace names no model" in everything, everything
    code, _, everything = run("--trace", str(_trace(tmp_path)), "--sweep", "--replicas", "1", "--gpu-sizes", "2048t,512t")
    assert code == 2 and "--gpu-sizes" in everything and "512t: must hold" in everything and "at least 1024" in everything, everything


def test_ray_gives_the_local_rows() -> None:
    ray = pytest.importorskip("ray", reason="Ray is not installed (the cluster extra)")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        args = ("--replicas", "1,2", "--router", "round-robin", "--router", "affinity")
        # --ray auto joins the Ray started here, as the advisor's does.
        assert sweep_json(*args, "--ray", "auto") == sweep_json(*args, "--workers", "2")
    finally:
        ray.shutdown()


def test_without_ray_the_error_is_the_advisors(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_ray(name: str, *args: object, **kwargs: object) -> object:
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_ray)
    code, _, everything = run(*SMALL, "--sweep", "--replicas", "1", "--ray", "auto")
    assert code == 2 and "Ray is not installed: pip install 'kvscope[cluster]'" in everything, everything
    result = CliRunner().invoke(main, ["advise", "--no-save", "--preset", "seed-lab", "--p50-ms", "100", "--ray", "auto"])
    assert result.exit_code == 2 and "Ray is not installed: pip install 'kvscope[cluster]'" in result.output
