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
    # Empty pieces are shared too (facts are memoised by the pieces' identity); scalars are not.
    empty: list[object] = []
    assert share(empty) is empty and share([]) is empty and share("x") == "x"


def test_the_table_starts_over_past_its_limit() -> None:
    share = SharedParts(limit=2)
    a, b, c = {"k": "a"}, {"k": "b"}, {"k": "c"}
    share(a), share(b), share(c)  # c does not fit: the table starts over with c alone
    assert share({"k": "c"}) is c
    assert share({"k": "a"}) is not a
