"""Tests for ragidx.evaluate.plots: the quality-vs-index-size axis stays readable."""

from __future__ import annotations

import itertools

import pytest

from tests.evaluate.test_report import _record

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def _tick_labels(sizes: list[float]) -> list[tuple[str, object]]:
    """The x tick labels drawn for records at ``sizes`` vectors per document, with their boxes."""
    import matplotlib.pyplot as plt

    from ragidx.evaluate.plots import draw_tradeoff

    rows = [_record(f"s{i}", {256: 50.0 + i}, size) for i, size in enumerate(sizes)]
    figure, axes = plt.subplots(figsize=(7.2, 4.6))
    try:
        draw_tradeoff(axes, rows)
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        ticks = [*axes.xaxis.get_major_ticks(), *axes.xaxis.get_minor_ticks()]
        lo, hi = axes.get_xlim()
        return [
            (tick.label1.get_text(), tick.label1.get_window_extent(renderer))
            for tick in ticks
            if tick.label1.get_visible() and tick.label1.get_text() and lo <= tick.get_loc() <= hi
        ]
    finally:
        plt.close(figure)


@pytest.mark.parametrize("sizes", [[1.0, 1.6, 1.7], [1.0, 1.3], [1.0, 4.0, 26.6, 104.0], [1.0, 2.0, 10.0]])
def test_tradeoff_x_labels_are_plain_numbers_that_do_not_overlap(sizes: list[float]) -> None:
    labels = _tick_labels(sizes)
    assert len(labels) >= 2, labels
    for text, _ in labels:
        assert "10^" not in text and "times" not in text and "×" not in text, text  # no 1.6×10⁰
        float(text.replace("−", "-"))  # a plain number
    for (a, box_a), (b, box_b) in itertools.combinations(labels, 2):
        assert not box_a.overlaps(box_b), (a, b)


def test_tradeoff_axis_is_logarithmic_only_across_a_decade() -> None:
    import matplotlib.pyplot as plt

    from ragidx.evaluate.plots import draw_tradeoff

    for sizes, scale in (([1.0, 1.6, 1.7], "linear"), ([1.0, 4.0, 104.0], "log")):
        figure, axes = plt.subplots()
        draw_tradeoff(axes, [_record(f"s{i}", {256: 50.0}, x) for i, x in enumerate(sizes)])
        assert axes.get_xscale() == scale
        plt.close(figure)
