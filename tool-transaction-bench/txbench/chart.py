"""The headline as a picture: unsafe runs and liveness per fault depth, naive against guarded.

An SVG written from the summary alone (its sweep table, seed and verdicts), with the standard
library and integer geometry only: every coordinate is a whole pixel computed by integer
arithmetic, and every number shown is a count or a ratio text the summary already holds, so the
bytes are the same on every run and every Python the bench supports. write_results writes it
beside the numbers, and check_results compares it byte for byte like them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from xml.sax.saxutils import escape


# ================================================================================================
# 14b. The headline chart: unsafe runs and liveness per fault depth, from the summary
# ================================================================================================

CHART_WIDTH: Final = 780
CHART_HEIGHT: Final = 420
PLOT_TOP: Final = 112  # below the title, the legend and the panel titles
PLOT_HEIGHT: Final = 200
PANEL_LEFT: Final = (64, 430)  # each panel's plot area starts here; the liveness floor's label follows the second
GROUP_WIDTH: Final = 72  # one fault depth: two bars and the space around them
BAR_WIDTH: Final = 26
BAR_GAP: Final = 8
# The two orchestrators, in drawing order, with colours told apart in grey as well (ColorBrewer Dark2).
SERIES: Final = (("naive", "#d95f02"), ("guarded", "#1b9e77"))
FONT: Final = "font-family=\"DejaVu Sans, Verdana, sans-serif\""


def scaled(part: int, whole: int, size: int) -> int:
    """part / whole of size, rounded half up, in integers (no float, so no platform's rounding)."""
    if whole <= 0:
        return 0
    return (2 * part * size + whole) // (2 * whole)


def _text(x: int, y: int, content: str, *, size: int = 11, anchor: str = "middle", weight: str = "normal",
          fill: str = "#1d2328") -> str:
    return (f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{fill}">{escape(content)}</text>')


def _rows(sweep: Mapping[str, Any]) -> dict[tuple[int, str], Mapping[str, Any]]:
    return {(row["depth"], row["orchestrator"]): row for row in sweep["depths"]}


def _axis(left: int, ticks: tuple[tuple[int, str], ...]) -> list[str]:
    """The frame of one panel: grid lines at the ticks (part of PLOT_HEIGHT, label), then the base."""
    right = left + GROUP_WIDTH * 4
    bottom = PLOT_TOP + PLOT_HEIGHT
    out = []
    for height, label in ticks:
        y = bottom - height
        out.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#d5dbe0" stroke-width="1"/>')
        out.append(_text(left - 6, y + 4, label, size=10, anchor="end", fill="#5b6670"))
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#5b6670" stroke-width="1"/>')
    return out


def _bar(x: int, height: int, colour: str, label: str) -> list[str]:
    bottom = PLOT_TOP + PLOT_HEIGHT
    return [f'<rect x="{x}" y="{bottom - height}" width="{BAR_WIDTH}" height="{height}" fill="{colour}"/>',
            _text(x + BAR_WIDTH // 2, bottom - height - 4, label, size=10)]


def _bar_x(left: int, group: int, series: int) -> int:
    margin = (GROUP_WIDTH - 2 * BAR_WIDTH - BAR_GAP) // 2
    return left + group * GROUP_WIDTH + margin + series * (BAR_WIDTH + BAR_GAP)


def _depth_labels(left: int, sweep: Mapping[str, Any], depths: list[int]) -> list[str]:
    rows = _rows(sweep)
    bottom = PLOT_TOP + PLOT_HEIGHT
    out = []
    for group, depth in enumerate(depths):
        centre = left + group * GROUP_WIDTH + GROUP_WIDTH // 2
        row = rows[(depth, SERIES[0][0])]
        runs = f"{row['runs']} of {row['space']}" if row["runs"] != row["space"] else (
            "1 run" if row["runs"] == 1 else f"{row['runs']} runs")
        out += [_text(centre, bottom + 16, f"depth {depth}"), _text(centre, bottom + 30, runs, size=10, fill="#5b6670")]
    return out


def _unsafe_panel(sweep: Mapping[str, Any], depths: list[int]) -> list[str]:
    left = PANEL_LEFT[0]
    rows = _rows(sweep)
    out = _axis(left, tuple((scaled(share, 4, PLOT_HEIGHT), f"{25 * share}%") for share in range(5)))
    for group, depth in enumerate(depths):
        for series, (name, colour) in enumerate(SERIES):
            row = rows[(depth, name)]
            out += _bar(_bar_x(left, group, series), scaled(row["unsafe"], row["runs"], PLOT_HEIGHT), colour,
                        f"{scaled(row['unsafe'], row['runs'], 100)}%")
    out.append(_text(left, PLOT_TOP - 30, "Unsafe runs: a run that broke any invariant", size=12, anchor="start",
                     weight="bold"))
    out.append(_text(left, PLOT_TOP - 16, "share of the runs at each fault depth", size=10, anchor="start",
                     fill="#5b6670"))
    return out + _depth_labels(left, sweep, depths)


def _liveness_panel(sweep: Mapping[str, Any], depths: list[int], floor: tuple[int, int]) -> list[str]:
    left = PANEL_LEFT[1]
    rows = _rows(sweep)
    out = _axis(left, tuple((scaled(share, 4, PLOT_HEIGHT), ("0", "0.25", "0.5", "0.75", "1")[share])
                            for share in range(5)))
    for group, depth in enumerate(depths):
        for series, (name, colour) in enumerate(SERIES):
            row = rows[(depth, name)]
            out += _bar(_bar_x(left, group, series), scaled(row["live"], row["completable"], PLOT_HEIGHT), colour,
                        row["liveness"])
    y = PLOT_TOP + PLOT_HEIGHT - scaled(floor[0], floor[1], PLOT_HEIGHT)
    right = left + GROUP_WIDTH * 4
    out.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#b3261e" stroke-width="1" '
               f'stroke-dasharray="4 3"/>')
    out.append(_text(right + 4, y + 4, f"floor {floor[0]}/{floor[1]}", size=10, anchor="start", fill="#b3261e"))
    out.append(_text(left, PLOT_TOP - 30, "Liveness: live runs / completable runs", size=12, anchor="start",
                     weight="bold"))
    out.append(_text(left, PLOT_TOP - 16, "a live run left the state a run with no fault leaves", size=10,
                     anchor="start", fill="#5b6670"))
    return out + _depth_labels(left, sweep, depths)


def _legend() -> list[str]:
    out = []
    for position, (name, colour) in enumerate(SERIES):
        x = 16 + position * 90
        out += [f'<rect x="{x}" y="34" width="12" height="12" fill="{colour}"/>',
                _text(x + 17, 44, name, size=11, anchor="start")]
    return out


def _verdict_lines(sweep: Mapping[str, Any]) -> list[str]:
    lines = []
    for name, _colour in reversed(SERIES):
        row = sweep["verdicts"][name]
        lines.append(f"{name}: {row['verdict'].upper()}, {row['unsafe']} unsafe runs of {row['runs']}, liveness "
                     f"{row['live']}/{row['completable']} = {row['liveness']} (floor {sweep['liveness_floor']})")
    return lines


def headline_svg(summary: Mapping[str, Any]) -> bytes:
    """The chart of a summary's sweep, as the bytes of an SVG file."""
    sweep = summary["sweep"]
    depths = sorted({row["depth"] for row in sweep["depths"]})
    floor_text = sweep["liveness_floor"].split("/")
    floor = (int(floor_text[0]), int(floor_text[1]))
    title = (f"tool-transaction-bench fault sweep, seed {summary['seed']}: {sweep['runs_per_orchestrator']} fault "
             f"sets per orchestrator, up to {sweep['max_depth']} faults on {len(sweep['tools'])} tools")
    sample = ""
    if sweep["sample_per_depth"] is not None:
        sample = (f"Depths up to {sweep['exhaustive_depth']} run whole; deeper, every one-tool set and a sample of "
                  f"{sweep['sample_per_depth']} spread sets.")
    verdicts = _verdict_lines(sweep)
    description = " ".join([title + ".", *(line + "." for line in verdicts), sample]).strip()
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" '
        f'viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" aria-labelledby="title desc" {FONT}>',
        f'<title id="title">{escape(title)}</title>',
        f'<desc id="desc">{escape(description)}</desc>',
        f'<rect x="0" y="0" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" fill="#ffffff"/>',
        _text(16, 22, title, size=12, anchor="start", weight="bold"),
        *_legend(),
        *_unsafe_panel(sweep, depths),
        *_liveness_panel(sweep, depths, floor),
        *(_text(16, CHART_HEIGHT - 40 + 14 * position, "Sweep verdict " + line, size=10, anchor="start")
          for position, line in enumerate(verdicts)),
    ]
    if sample:
        body.append(_text(16, CHART_HEIGHT - 12, sample, size=10, anchor="start", fill="#5b6670"))
    body.append("</svg>")
    return ("\n".join(body) + "\n").encode("utf-8")
