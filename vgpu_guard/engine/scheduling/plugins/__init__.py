"""The filter plugins that vgpu-guard runs for the pods it binds, one module each.

Each module has one plugin object, ``PLUGIN``, of the shape ``scheduling.plugin.Plugin``
(``prepare`` once per pod, ``filter`` per node), its ``NAME`` and its reason texts. Names, order
and texts are kube-scheduler 1.20's (pkg/scheduler/framework/plugins), so the ``0/N nodes are
available`` message reads like kube-scheduler's and users can map each reason to the plugin's
documentation; the node's own checks (NodeReady, NodeUnschedulable, NodeAffinity,
TaintToleration) keep vgpu-guard's wording ("2 nodes are unschedulable"). ``framework`` runs them.
"""
