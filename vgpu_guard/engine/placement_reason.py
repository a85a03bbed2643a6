"""The ``0/N nodes are available: ...`` message of a pod we cannot place.

Users read it in ``kubectl describe pod`` (condition PodScheduled=False, reason Unschedulable, and
the Event), so it follows kube-scheduler's shape: the number of nodes, then every reason with a
count. Node-level reasons count nodes ("2 nodes are unschedulable"); for nodes that passed them, the
reasons count GPUs ("7 GPUs have no free memory"), because with shared GPUs "Insufficient
volcano.sh/vgpu-memory" says nothing about which card came close. Of the GPUs short of memory,
the one that came closest is quoted with its numbers, so the user sees by how much they missed:
``1 GPU has 8192 MiB free < 12288 MiB requested``. The GPUs that Volcano's PodGroup spread policy
refuses are named, so the user sees which cards the other members hold. Golden tests pin these
strings.

A gang that cannot start whole quotes its first member that did not fit, judged with the members
before it placed tentatively: its numbers are what those placements would leave, not the ledger
(nothing of the gang is placed). ``judged_after`` says so in the reason itself, so the Event, the
pod's condition and every output that repeats it agree with a ledger that shows those cards empty.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["CardFailure", "NodeFailure", "judged_after", "unavailable_message"]

# Order in which reasons are listed: the node-level ones first, then the GPU ones in the order
# Volcano checks a card.
_NODE_ORDER = (
    "not-ready",
    "unschedulable",
    "selector",
    "taint",
    "scheduler",
    "no-gpu",
    "gpu-problem",
    "ledger",
    "mode",
    "cards",
    "fit",
)
_CARD_ORDER = (
    "uuid-use",
    "uuid-nouse",
    "unhealthy",
    "registered-twice",
    "split",
    "podgroup",
    "memory",
    "cores",
    "exclusive",
    "cores-full",
    "type",
    "use-type",
    "nouse-type",
    "mig",
    "reserved",
)


@dataclass(frozen=True, slots=True)
class CardFailure:
    """Why one GPU cannot take one container: a code from ``_CARD_ORDER`` and the numbers."""

    code: str
    free: int = 0
    need: int = 0
    detail: str = ""
    # The GPU's UUID, for the reasons that list the cards by name (``podgroup``).
    card: str = ""


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """Why a node cannot take the pod: a code from ``_NODE_ORDER`` and a detail for the text.

    Code ``scheduler`` carries kube-scheduler's own reason texts (``Insufficient cpu``, ...), one
    or more per node; each is counted and shown as kube-scheduler shows it (``2 Insufficient cpu``).
    """

    code: str
    detail: str = ""
    reasons: tuple[str, ...] = ()


def _count(n: int, singular: str, plural: str, what: str = "node") -> str:
    return f"{n} {what} {singular}" if n == 1 else f"{n} {what}s {plural}"


def _node_text(code: str, detail: str, n: int) -> str:
    texts = {
        "not-ready": ("is not ready", "are not ready"),
        "unschedulable": ("is unschedulable", "are unschedulable"),
        "selector": (
            "doesn't match the pod's node selector/affinity",
            "don't match the pod's node selector/affinity",
        ),
        "taint": (f"has untolerated taint {detail}", f"have untolerated taint {detail}"),
        "no-gpu": ("has no vGPU devices", "have no vGPU devices"),
        "gpu-problem": ("has an unusable vGPU registration", "have an unusable vGPU registration"),
        # The controller's writes of the node's GPULedger fail (the node's Events say why); it is
        # kept out of placement until its retry is due (controller/node_queue.py).
        "ledger": ("has a GPULedger that cannot be written", "have a GPULedger that cannot be written"),
        "mode": (f"is in {detail}", f"are in {detail}"),
        "cards": (f"has only {detail}", f"have only {detail}"),
        "fit": (f"has only {detail}", f"have only {detail}"),
    }
    singular, plural = texts[code]
    return _count(n, singular, plural)


def _card_text(code: str, detail: str, n: int) -> str:
    texts = {
        "uuid-use": (
            "isn't listed in volcano.sh/vgpu-use-gpuuuid",
            "aren't listed in volcano.sh/vgpu-use-gpuuuid",
        ),
        "uuid-nouse": (
            "is listed in volcano.sh/vgpu-nouse-gpuuuid",
            "are listed in volcano.sh/vgpu-nouse-gpuuuid",
        ),
        "unhealthy": ("is unhealthy", "are unhealthy"),
        "registered-twice": (
            "is registered twice in volcano.sh/node-vgpu-register",
            "are registered twice in volcano.sh/node-vgpu-register",
        ),
        "split": ("has no free vGPU slot", "have no free vGPU slot"),
        "cores": (f"has less than {detail}% cores free", f"have less than {detail}% cores free"),
        "exclusive": (
            "is shared (100% cores needs an empty GPU)",
            "are shared (100% cores needs an empty GPU)",
        ),
        "cores-full": ("has all cores taken", "have all cores taken"),
        "type": ("is not an NVIDIA GPU", "are not NVIDIA GPUs"),
        "use-type": (
            f"doesn't match nvidia.com/use-gputype={detail}",
            f"don't match nvidia.com/use-gputype={detail}",
        ),
        "nouse-type": (
            f"matches nvidia.com/nouse-gputype={detail}",
            f"match nvidia.com/nouse-gputype={detail}",
        ),
        "mig": (f"has no free MIG instance {detail}", f"have no free MIG instance {detail}"),
        "reserved": ("is kept free for nvidia.com/gpu pods", "are kept free for nvidia.com/gpu pods"),
    }
    singular, plural = texts[code]
    return _count(n, singular, plural, "GPU")


# How many refused GPUs a reason names before it only counts the rest.
_NAMED_CARDS = 5
# Reasons that name their GPUs: what makes them refuse is another pod on that very card (or its
# registration), so the user needs the card to find the holder (``vgpu-guard status``).
_NAMING = ("registered-twice", "exclusive", "cores-full")


def _named(uuids: list[str]) -> str:
    named = ", ".join(uuids[:_NAMED_CARDS])
    return named + (f" and {len(uuids) - _NAMED_CARDS} more" if len(uuids) > _NAMED_CARDS else "")


def _naming_text(code: str, failures: list[CardFailure]) -> str:
    """One reason for ``code``, counting and naming its distinct GPUs."""
    uuids = list(dict.fromkeys(f.card for f in failures))
    return f"{_card_text(code, '', len(uuids))}: {_named(uuids)}"


def _podgroup_texts(failures: list[CardFailure]) -> list[str]:
    """One reason per PodGroup (a pod has one; the detail is ``namespace/name``), naming its GPUs."""
    cards: dict[str, list[str]] = {}
    for f in failures:
        listed = cards.setdefault(f.detail, [])
        if f.card not in listed:
            listed.append(f.card)
    out = []
    for group, uuids in sorted(cards.items()):
        head = _count(
            len(uuids),
            f"holds another member of PodGroup {group}",
            f"hold other members of PodGroup {group}",
            "GPU",
        )
        out.append(f"{head} (volcano.sh/vgpu-podgroup-policy=spread): {_named(uuids)}")
    return out


def _memory_texts(failures: list[CardFailure]) -> list[str]:
    # The closest miss (most free memory; the first such GPU on ties) is quoted with its numbers.
    closest = max(range(len(failures)), key=lambda i: (failures[i].free, -i))
    if failures[closest].free == 0:
        # None has any: one count, not "7 have no free memory, 1 has 0 MiB free".
        many = _count(len(failures), "has no free memory", "have no free memory", "GPU")
        return [f"{many} ({failures[closest].need} MiB requested)"]
    rest = [f for i, f in enumerate(failures) if i != closest]
    out = []
    none_free = sum(1 for f in rest if f.free == 0)
    too_little = len(rest) - none_free
    if none_free:
        out.append(_count(none_free, "has no free memory", "have no free memory", "GPU"))
    if too_little:
        out.append(_count(too_little, "has too little free memory", "have too little free memory", "GPU"))
    c = failures[closest]
    out.append(f"1 GPU has {c.free} MiB free < {c.need} MiB requested")
    return out


# How many of the members placed before a gang's blocker its reason names before it only counts.
_NAMED_MEMBERS = 3


def judged_after(task: str, placed: Sequence[str]) -> str:
    """How a gang's reason introduces its blocker ``task``: when members were placed before it
    (tentatively), that its numbers are what would remain once they are placed."""
    if not placed:
        return task
    names = ", ".join(placed[:_NAMED_MEMBERS])
    if len(placed) > _NAMED_MEMBERS:
        names += f" and {len(placed) - _NAMED_MEMBERS} more"
    return f"{task}, judged on what would remain once {names} {'is' if len(placed) == 1 else 'are'} placed"


def unavailable_message(total_nodes: int, nodes: Iterable[NodeFailure], cards: Iterable[CardFailure]) -> str:
    """``0/N nodes are available: <reasons>`` from per-node and per-GPU failures."""
    node_list = list(nodes)
    node_counts = Counter((f.code, f.detail) for f in node_list if f.code != "scheduler")
    scheduler_counts = Counter(r for f in node_list if f.code == "scheduler" for r in f.reasons)
    card_list = list(cards)
    parts: list[str] = []
    for code in _NODE_ORDER:
        if code == "scheduler":
            # kube-scheduler's histogram: "<count> <reason>", sorted by that text.
            parts.extend(sorted(f"{n} {reason}" for reason, n in scheduler_counts.items()))
            continue
        for (c, detail), n in sorted(node_counts.items()):
            if c == code:
                parts.append(_node_text(c, detail, n))
    card_counts = Counter(
        (f.code, f.detail) for f in card_list if f.code not in ("memory", "podgroup", *_NAMING)
    )
    for code in _CARD_ORDER:
        if code in _NAMING:
            named = [f for f in card_list if f.code == code]
            if named:
                parts.append(_naming_text(code, named))
            continue
        if code == "podgroup":
            parts.extend(_podgroup_texts([f for f in card_list if f.code == "podgroup"]))
            continue
        if code == "memory":
            memory = [f for f in card_list if f.code == "memory"]
            if memory:
                parts.extend(_memory_texts(memory))
            continue
        for (c, detail), n in sorted(card_counts.items()):
            if c == code:
                parts.append(_card_text(c, detail, n))
    reasons = ", ".join(parts) if parts else "no node offers vGPU devices"
    # kube-scheduler says "0/1 nodes are available" too; users grep for that shape.
    return f"0/{total_nodes} nodes are available: {reasons}"
