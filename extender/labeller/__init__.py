"""Derived per-class node labels (``serve --label-nodes``): the leader keeps them on the nodes."""
