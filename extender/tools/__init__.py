"""The operator commands: explain, classes, replay and the kubectl plugin."""
