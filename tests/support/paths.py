"""Where the repository's files are, for every test: one copy of each path."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS_DATA = REPO / "tests" / "data"
DEPLOY = REPO / "deploy"
EXAMPLES = DEPLOY / "examples"
EXAMPLE_CLUSTER = EXAMPLES / "cluster.yaml"
# The opt-in monitoring component: PodMonitor, PrometheusRule, Grafana dashboard.
MONITORING = REPO / "deploy" / "components" / "monitoring"
# The six-node cluster the captured kube-scheduler requests came from.
CAPTURE_CLUSTER = TESTS_DATA / "capture-cluster.yaml"
# AdmissionReviews captured from a real kube-apiserver (tests/data/admission/README.md).
ADMISSION_DATA = TESTS_DATA / "admission"
ADMISSION_CLUSTER = ADMISSION_DATA / "cluster.yaml"
# Requests captured from a real kube-scheduler (README.md there says how), kept in the
# repository so every clone replays them.
FIXTURES = TESTS_DATA / "fixtures"
KUBE_SCHEDULER_FIXTURES = FIXTURES / "kube-scheduler"
# The operator documentation: README.md is the map, docs/ the pages by task.
README = REPO / "README.md"
DOCS = REPO / "docs"
