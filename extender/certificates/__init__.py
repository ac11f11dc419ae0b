"""Self-managed certificates of the admission webhooks (``serve --webhook-certificate-secret``).

``authority`` mints and reads the certificates (ECDSA P-256, SHA-256), ``plan`` decides
from what the Secret and the two caBundles hold (and which CAs signed what the
replicas serve) what they should hold (pure), ``secret`` is the Secret's layout,
``serving`` switches the admission listener to a new pair without a restart, and
``replicas`` asks every endpoint of the webhook Service which certificate it serves.
``keeper`` is the leader actor that does the I/O, wiring its parts: ``options`` (what
it is told), ``bundles`` (the caBundles as its informers show them), ``follow`` (every
replica observes and chooses what to serve), ``writer`` (the leader plans and writes)
and ``metrics``.
"""
