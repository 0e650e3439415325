from gpugauge.report.tables import fmt_bytes, render


def test_render_golden() -> None:
    text = render(["name", "ms"], [["relu", "0.08"], ["conv-fwd", "9.5"]], "title")
    assert text == ("title\nname        ms\n--------  ----\nrelu      0.08\nconv-fwd   9.5")


def test_fmt_bytes() -> None:
    assert fmt_bytes(None) == "-"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(1536) == "1.5 KiB"
    assert fmt_bytes(10.9 * 2**30) == "10.9 GiB"
    assert fmt_bytes(-2 * 2**20) == "-2.0 MiB"
