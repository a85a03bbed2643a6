"""kube-scheduler's filter plugins that vgpu-guard runs for the pods it binds, one module each.

Names, order and reason texts are kube-scheduler 1.20's (pkg/scheduler/framework/plugins), so the
``0/N nodes are available`` message reads like kube-scheduler's and users can map each reason to
the plugin's documentation. NodeUnschedulable, NodeAffinity and TaintToleration live in
``vgpu_guard.engine.node_filter`` (with Ready), which runs before these.
"""
