"""The soak's verdict (tests/integration/chaos/soak.py) on made-up samples: a metric that keeps
climbing in the second half fails it, warm-up growth in the first half does not, and a flat or
falling one passes."""

from __future__ import annotations

from chaos import soak


def series(rss: list[float], files: float = 30.0) -> list[dict]:  # type: ignore[type-arg]
    """One sample a minute of one gateway."""
    return [
        {"t": float(i), "proc": {"gw": {"rss_mib": r, "open_files": files, "loop_lag_ms": 1.0}}}
        for i, r in enumerate(rss)
    ]


def test_the_least_squares_slope() -> None:
    assert soak.slope([(0, 1), (1, 3), (2, 5)]) == 2.0
    assert soak.slope([(0, 4), (1, 4)]) == 0.0
    assert soak.slope([(0, 1)]) == 0.0


def test_a_climb_in_the_second_half_fails() -> None:
    rss = [100.0] * 10 + [100.0 + 2 * i for i in range(11)]  # 2 MiB/min from minute 10
    fitted = soak.slopes(series(rss))
    assert round(fitted["gw"]["rss_mib"]["slope_per_min"], 6) == 2.0
    assert soak.over_bounds(fitted) == ["gw rss_mib +2.000/min > 1.0"]


def test_warm_up_growth_and_noise_pass() -> None:
    rss = [80.0 + 2 * i for i in range(10)] + [100.0, 100.5, 99.8, 100.2, 100.1] * 2 + [100.0]
    fitted = soak.slopes(series(rss))
    assert fitted["gw"]["rss_mib"]["from"] == 100.0
    assert soak.over_bounds(fitted) == []
    assert set(fitted["gw"]) == {"rss_mib", "open_files", "loop_lag_ms"}
