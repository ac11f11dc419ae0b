"""Auditing running pods: which bound pods no longer fit their RuntimeClass's nodes.

``check`` is the pure decision (``audit``, ``MisplacedIndex``); ``auditor`` the
informer of scheduled pods that keeps the index current in ``serve
--audit-running-pods``; ``metrics`` its gauges. The ``audit`` command is
``extender.tools.audit``.
"""
