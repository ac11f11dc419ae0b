"""The generic Kubernetes client: connecting, API access, backoff, reflectors, stores, informers and their health.

Nothing here knows of RuntimeClasses (the import-linter contracts keep it so): the
cluster state (``extender.cluster``) and the leader actors build on it.
"""
