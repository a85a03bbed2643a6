"""``QueueTree.cycles``: every spec.parent loop, once, in parent order from its first queue by name."""

from __future__ import annotations

from vgpu_guard.engine.rules.queues_validate import QueueTree


def test_each_cycle_once_in_parent_order_from_its_smallest_name() -> None:
    tree = QueueTree(
        parents={
            "qy": "qx",
            "qx": "qy",  # two updates admitted together
            "self": "self",
            "c": "d",
            "b": "c",
            "d": "b",
            "tail": "b",  # leads into a cycle without being on it
            "top": "root",
            "plain": "",
            "orphan": "missing",
            "child": "top",
        }
    )
    assert tree.cycles() == [("b", "c", "d"), ("qx", "qy"), ("self",)]


def test_a_tree_has_no_cycle() -> None:
    assert QueueTree(parents={"a": "root", "b": "a", "c": "b", "d": ""}).cycles() == []
