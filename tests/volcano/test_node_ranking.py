"""The session's nodes ranked per kind of task (vgpu_guard/volcano/node_ranking.py) choose exactly
what judging every node for every task chooses (allocate.go's loop, as the model ran it before
issue 45): the same node, devices and FitErrors message, the same cards after the session."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from math import floor
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import A30, A100_40, default_config, gpu_node, pod
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.volcano.binder import parse_version
from vgpu_guard.volcano.device_cache import NodeDevices
from vgpu_guard.volcano.deviceshare import fit
from vgpu_guard.volcano.session_devices import (
    POLICY,
    Placed,
    SessionDevices,
    _node_reason,
    encode,
)

CONFIG = default_config()


class EveryNode(SessionDevices):
    """The reference: every node judged for every task, the first best kept (the loop as it was)."""

    def place(self, pod: Obj, *, count: bool) -> Placed | str:
        reasons: Counter[str] = Counter()
        best: tuple[int, str, NodeDevices, Any] | None = None
        for name, info in self.nodes.items():
            reason = _node_reason(info, as_mapping(pod.get("spec")))
            devices = self.cards.get(name)
            if reason is None and devices is None:
                reason = f"Insufficient {self.config.nvidia.resource_count_name}"
            if reason is not None or devices is None:
                reasons[reason or ""] += 1
                continue
            trial = devices.copy()
            result = fit(pod, trial, nvidia=self.config.nvidia, version=self.version, policy=POLICY)
            if isinstance(result, str):
                reasons[f"hami-vgpuDeviceSharing {result}"] += 1
                continue
            score = floor(result.score + Fraction(1, 2))
            if best is None or score > best[0]:
                best = (score, name, trial, result)
        if best is None:
            histogram = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
            return f"0/{len(self.nodes)} nodes are unavailable: {histogram}."
        _, name, trial, result = best
        placed = Placed(str(pod["metadata"].get("uid") or ""), name, encode(result))
        if count:
            self.cards[name] = trial
            self._bookkeeping(pod, placed)
        return placed


def _nodes(draw: st.DrawFn) -> list[Obj]:
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        labels = {"pool": draw(st.sampled_from(["a", "b"]))}
        node = gpu_node(
            f"n{i}",
            count=draw(st.integers(1, 4)),
            memory=draw(st.sampled_from([8192, 16384, 24576])),
            card_type=draw(st.sampled_from([A30, A100_40])),
            split=draw(st.integers(1, 4)),
            labels=labels,
        )
        if draw(st.booleans()) and i:
            node["spec"]["taints"] = [{"key": "gpu", "value": "x", "effect": "NoSchedule"}]
        nodes.append(node)
    return nodes


def _kind(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """What a kind of task asks: its vGPU limits, annotations and node constraints."""
    limits: dict[str, Any] = {"volcano.sh/vgpu-number": draw(st.integers(1, 2))}
    limits["volcano.sh/vgpu-memory"] = draw(st.sampled_from([0, 2048, 4096, 8192, 12288]))
    limits["volcano.sh/vgpu-cores"] = draw(st.sampled_from([0, 30, 100]))
    notes = {}
    if draw(st.booleans()):
        notes["nvidia.com/use-gputype"] = draw(st.sampled_from(["A30", "A100"]))
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["nodeSelector"] = {"pool": draw(st.sampled_from(["a", "b"]))}
    if draw(st.booleans()):
        spec["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return limits, notes, spec


def _pods(draw: st.DrawFn) -> list[Obj]:
    """Tasks of a few kinds, so that tasks of one kind meet nodes a task before them changed."""
    kinds = [_kind(draw) for _ in range(draw(st.integers(1, 3)))]
    pods = []
    for i in range(draw(st.integers(1, 25))):
        limits, notes, spec = kinds[draw(st.integers(0, len(kinds) - 1))]
        obj = pod(limits, name=f"p{i}", annotations=notes, **spec)
        obj["metadata"]["uid"] = f"uid-{i}"
        pods.append(obj)
    return pods


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[Obj], list[Obj], list[tuple[bool, bool]], str]:
    """Nodes, tasks, and for each task whether the session counts it and whether its statement is
    then discarded; a release."""
    pods = _pods(draw)
    steps = [(draw(st.booleans()), draw(st.booleans())) for _ in pods]
    return _nodes(draw), pods, steps, draw(st.sampled_from(["1.12", "1.14", "1.15", "1.16"]))


@settings(max_examples=150, deadline=None)
@given(sessions())
def test_ranked_nodes_choose_what_judging_every_node_chooses(case: tuple[Any, ...]) -> None:
    nodes, pods, steps, release = case
    version = parse_version(release)
    ranked = SessionDevices(nodes, [], CONFIG, version)
    reference = EveryNode(nodes, [], CONFIG, version)
    for task, (count, discarded) in zip(pods, steps, strict=True):
        chosen = ranked.place(task, count=count)
        assert chosen == reference.place(task, count=count)
        if isinstance(chosen, Placed) and count and discarded:
            ranked.discard(chosen)  # a discarded statement gives the numbers back (v1.15+)
            reference.discard(chosen)
    assert ranked.cards == reference.cards
