"""What the extender knows of cluster-autoscaler and Karpenter: which of them runs and
which RuntimeClass rules it cannot see (``autoscalers``, pure; ``finder``, every
replica's look and its warning), what a node group's template must carry
(``node_templates``), and the startup taint a new node waits under for its labels
(``startup_taint``)."""
