"""SharedParts: equal pieces come back as the first one seen; the table is bounded."""

from __future__ import annotations

from vgpu_guard.kube.sharing import SharedParts


def test_equal_pieces_are_held_once() -> None:
    share = SharedParts()
    first = [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]
    again = [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]
    other = [{"name": "c", "resources": {"limits": {"cpu": "2"}}}]
    assert share(first) is first
    assert share(again) is first and share.hits == 1
    assert share(other) is other
    # Empty pieces are shared too (facts are memoised by the pieces' identity), one per kind, by
    # every table; scalars are not.
    assert share([]) is share([]) is SharedParts()([]) and share([]) == []
    assert share({}) is share({}) is not share([]) and share({}) == {}
    assert share("x") == "x"


def test_the_table_starts_over_past_its_limit() -> None:
    share = SharedParts(limit=2)
    a, b, c = {"k": "a"}, {"k": "b"}, {"k": "c"}
    share(a), share(b), share(c)  # c does not fit: the table starts over with c alone
    assert share({"k": "c"}) is c
    assert share({"k": "a"}) is not a


def test_only_pieces_equal_in_value_and_type_meet() -> None:
    """Keys keep types: ``1``, ``1.0``, ``True`` and ``"1"`` are different pieces (compact JSON, the
    key before, made ``{1: "a"}`` and ``{"1": "a"}`` one piece)."""
    share = SharedParts()
    pieces: list[object] = [
        {"v": 1},
        {"v": 1.0},
        {"v": True},
        {"v": "1"},
        {1: "a"},
        {"1": "a"},
        [[1]],
        [(1,)],
    ]
    for piece in pieces:
        assert share(piece) is piece, piece


def test_a_piece_is_found_whatever_objects_it_is_built_from() -> None:
    """Decoded JSON builds every string anew; the same text must still find the first piece."""
    share = SharedParts()
    name = "".join(["tr", "ain"])
    first = {"app": name, "tier": name}  # one string object twice
    again = {"".join(["a", "pp"]): "train", "tier": "".join(["tr", "ain"])}
    assert share(first) is first and share(again) is first


def test_what_is_not_plain_data_is_kept_as_it_is() -> None:
    class Token(str):
        pass

    share = SharedParts()
    odd = {"k": Token("x")}
    assert share(odd) is odd and share({"k": Token("x")}) is not odd and share.hits == 0
