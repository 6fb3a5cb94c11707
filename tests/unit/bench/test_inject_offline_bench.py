"""bench/inject_offline.py at a tiny scale: it runs, and the command it times leaves every
document that is not a workload byte for byte (no timing assertions)."""

from __future__ import annotations

from bench import inject_offline


def test_the_offline_inject_bench_runs_and_only_workloads_change() -> None:
    result = inject_offline.measure(rounds=1, target_bytes=40_000)
    assert result["output_documents"] == result["documents"] > 7
    assert result["changed_documents"] == 7  # 6 Deployments and a StatefulSet
    assert result["median_s"] > 0 and result["cpu_median_s"] > 0
