"""Exact quantity arithmetic: the comparisons seed 001's crash was made of."""

from __future__ import annotations

from fractions import Fraction

import pytest

from vgpu_guard.engine.quantity import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("32000m", "32"),
        ("64Gi", "68719476736"),
        ("1k", "1000"),
        ("1e3", "1000"),
        ("0.5", "500m"),
        (32, "32"),
        (0.5, "500m"),
        ("1Ki", 1024),
        ("+2", "2"),
        (".5", "500m"),
        ("1E3", "1k"),
        ("100u", "100000n"),
    ],
)
def test_equal_quantities_are_equal(a: object, b: object) -> None:
    assert parse_quantity(a).value == parse_quantity(b).value


def test_one_millicore_is_exact() -> None:
    assert parse_quantity("64001m").value - parse_quantity("64").value == Fraction(1, 1000)


def test_sum_of_many_small_values_has_no_float_drift() -> None:
    assert sum((parse_quantity("100m").value for _ in range(10)), Fraction(0)) == 1


@pytest.mark.parametrize(
    "raw", ["", "abc", "12GiB", "1.2.3", "--1", "1e99", True, None, [], {}, "x" * 100, float("nan")]
)
def test_invalid_quantities_raise_with_the_value(raw: object) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(raw)
    assert str(info.value)


@pytest.mark.parametrize(
    ("raw", "written"),
    [(True, "true"), (False, "false"), (None, "null"), ([1], "a list"), ({"a": 1}, "a map")],
)
def test_a_value_that_is_no_number_is_named_as_yaml_writes_it(raw: object, written: str) -> None:
    """Users wrote YAML: Python's True, None and list are not their words."""
    with pytest.raises(QuantityError) as info:
        parse_quantity(raw)
    assert str(info.value).startswith(f"{written} is not a quantity (expected a number such as 12")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("12", Fraction(12)),
        ("12Gi", Fraction(12 * 2**30)),
        ("+7", Fraction(7)),
        (" 3 ", Fraction(3)),
        ("250m", Fraction(1, 4)),
        ("\u0661\u0662", None),  # Arabic-Indic 12: not a quantity the API server accepts
        ("\u00b2", None),
    ],
)
def test_repeated_parses_give_the_same_exact_answer(raw: str, expected: Fraction | None) -> None:
    # Short strings are served from a cache: every answer, the first and the cached ones, must be
    # the exact value (or the error) the grammar gives.
    for _ in range(3):
        if expected is None:
            with pytest.raises(QuantityError, match="is not a quantity"):
                parse_quantity(raw)
        else:
            assert parse_quantity(raw).value == expected


def test_padded_strings_are_parsed_but_never_kept() -> None:
    from vgpu_guard.engine.quantity import _parse_cached

    before = _parse_cached.cache_info().currsize
    assert parse_quantity(" " * 100_000 + "5").value == 5
    assert _parse_cached.cache_info().currsize == before


def test_suffix_is_remembered() -> None:
    assert parse_quantity("12Gi").suffix == "Gi"
    assert parse_quantity("12").suffix == ""
    assert parse_quantity("1500m").is_integer is False


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (Fraction(64), False, "64"),
        (Fraction(68719476736), True, "64Gi"),
        (Fraction(1, 2), False, "500m"),
        (Fraction(1, 3000), False, "0.0003333333333333333333333333333"),
        (Fraction(1536), True, "1536"),
        (Fraction(1536 * 1024), True, "1536Ki"),
        (Fraction(0), True, "0"),
    ],
)
def test_format(value: Fraction, binary: bool, text: str) -> None:
    assert format_quantity(value, binary=binary) == text
