"""serverless-karpenter's core package."""

from serverless_karpenter.adapters.kubernetes_package import register_package_lazily

# First, before any module of ours imports the Kubernetes client: a cold start imports only the parts of
# the ``kubernetes`` package we use (see kubernetes_package).
register_package_lazily()
