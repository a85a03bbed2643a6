"""A model of Volcano, the scheduler vgpu-guard's default mode leaves in charge of vGPU pods.

vgpu-guard cannot run Volcano in ``simulate`` or in the sandbox (it is Go, built elsewhere), yet
its default mode only makes sense next to it: Volcano decides, the webhook's arbiter reserves every
GPU assignment Volcano writes, or refuses it. This package is the smallest Volcano that meets the
arbiter the way the real one does, read from Volcano's source (each module cites its files):

    binder.py   what Volcano writes for a vGPU task, per version: >= 1.16 the assignment on the
                Binding; 1.10-1.15 a PATCH of the pod, then the Binding
    jobs.py     the job controller: a Volcano Job's PodGroup ``<job>-<uid>`` first, its pods only
                once the scheduler has moved the PodGroup to Inqueue
    session.py  one scheduler session: enqueue (PodGroups Pending -> Inqueue), allocate (nodes and
                devices from its own cache, binpack, gangs all-or-nothing; optionally #3616's stale
                cache), then every binding of the session sent at once; a refused bind is decided
                again next session, on fresh data
    service.py  both, every second, against a real API server (``vgpu-guard sandbox --volcano-model``)

It talks to the API only (the ``ClusterClient`` protocol), as Volcano does: it never calls the
webhook or the controller, and what it writes meets whatever admission the API server runs. Device
choice reuses the engine's ``Allocator``, whose card and node rules are Volcano's deviceshare rules
(engine/card_fit.py, node_fit.py); a second copy of them here could only drift.
"""
