"""Tests of the container images, the default config and the Kubernetes manifests."""
