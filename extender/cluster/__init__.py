"""The RuntimeClass cluster state: slim views of Nodes, RuntimeClasses and pods, their
decoding and strictness, the sources that fill the state (the cluster file, the watch)
and what is derived from it for reading (per-class node counts, gauges). The generic
Kubernetes client it uses is ``extender.kube``."""
