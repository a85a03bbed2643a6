"""Warnings fit Kubernetes' 120 characters and keep what to do."""

from __future__ import annotations

from vgpu_guard.engine.violations import WARNING_LIMIT, clip_warning

PREFIX = "[vgpu-memory-unit] spec.containers[0].resources.limits[volcano.sh/vgpu-memory]: "


def test_a_short_warning_is_kept_as_it_is_with_its_spaces_folded() -> None:
    assert (
        clip_warning("[r] spec.x:  1 is  odd;\\n fix it".replace("\\n", "\n"))
        == "[r] spec.x: 1 is odd; fix it"
    )


def test_a_long_warning_keeps_its_remedy_and_cuts_the_explanation() -> None:
    text = (
        PREFIX
        + "12Gi has a unit suffix but vgpu-memory counts MiB (12Gi would mean 12884901888 MiB); write 12288"
    )
    clipped = clip_warning(text)
    assert clipped == PREFIX + "12Gi has a unit suffix but…; write 12288"
    assert len(clipped) == WARNING_LIMIT


def test_the_end_is_cut_when_keeping_the_remedy_would_cut_the_finding_itself() -> None:
    """The value found must survive: a remedy with nothing to refer to is no help."""
    text = PREFIX + "150 is outside 0..100 (percent of one GPU); use 0..100, 100 = whole card, or the default"
    clipped = clip_warning(text)
    assert clipped == text[: WARNING_LIMIT - 1] + "…"
    assert "150 is outside" in clipped


def test_a_long_remedy_is_cut_with_the_rest() -> None:
    text = "[r] spec.x: 1 is odd; " + "do this and that " * 8
    assert clip_warning(text) == " ".join(text.split())[: WARNING_LIMIT - 1] + "…"


def test_a_warning_without_a_remedy_is_cut_at_its_end() -> None:
    text = "vgpu-guard: " + "word " * 40
    assert clip_warning(text).endswith("…") and len(clip_warning(text)) == WARNING_LIMIT
