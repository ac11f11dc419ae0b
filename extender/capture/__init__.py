"""Capture and replay: the capture file format, the writer behind serve --capture-dir, replay."""
