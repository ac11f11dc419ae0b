"""Self-managed certificates of the admission webhooks (``serve --webhook-certificate-secret``).

``authority`` mints and reads the certificates (ECDSA P-256, SHA-256), ``plan`` decides
from what the Secret and the two caBundles hold what they should hold (pure),
``serving`` switches the admission listener to a new pair without a restart, and
``keeper`` is the I/O: every replica observes, the leader writes.
"""
