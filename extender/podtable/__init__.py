"""The pod admission table's keeper (``serve --pod-admission-table``)."""
