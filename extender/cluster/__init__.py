"""Cluster state: slim views of Nodes and RuntimeClasses, and the sources that fill them."""
