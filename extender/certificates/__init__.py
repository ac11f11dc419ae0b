"""Self-managed certificates of the admission webhooks (``serve --webhook-certificate-secret``).

``authority`` mints and reads the certificates (ECDSA P-256, SHA-256), ``plan`` decides
from what the Secret and the two caBundles hold (and which CAs signed what the
replicas serve) what they should hold (pure), ``serving`` switches the admission
listener to a new pair without a restart, ``replicas`` asks every endpoint of the
webhook Service which certificate it serves, and ``keeper`` is the I/O: every replica
observes and chooses what to serve, the leader writes.
"""
