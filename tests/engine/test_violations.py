"""Warnings fit Kubernetes' 120 characters and keep what to do."""

from __future__ import annotations

from vgpu_guard.engine.violations import WARNING_LIMIT, clip, clip_warning

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
    assert clip_warning(text) == PREFIX + "150 is outside 0..100 (percent of one…"


def test_a_long_remedy_is_cut_with_the_rest() -> None:
    text = "[r] spec.x: 1 is odd; " + "do this and that " * 8
    assert clip_warning(text) == "[r] spec.x: 1 is odd; " + "do this and that " * 5 + "do this and…"


def test_a_warning_without_a_remedy_is_cut_at_its_end() -> None:
    text = "vgpu-guard: " + "word " * 40
    assert clip_warning(text) == "vgpu-guard: " + "word " * 20 + "word…"


def test_cuts_fall_between_words() -> None:
    """Issue 38: "cannot te…" read as a typo; a cut word can also read as another value ("245…")."""
    text = "[r] spec.x: " + "the device plugin cannot tell the containers apart " * 4
    clipped = clip_warning(text)
    assert clipped == "[r] spec.x: " + "the device plugin cannot tell the containers apart " * 2 + "the…"
    assert len(clipped) <= WARNING_LIMIT
    assert clip("1 GPU has 8192 MiB free < 16384 MiB requested", 30) == "1 GPU has 8192 MiB free…"


def test_a_single_word_longer_than_the_width_is_cut_where_it_must_be() -> None:
    assert clip_warning("x" * 200) == "x" * (WARNING_LIMIT - 1) + "…"
