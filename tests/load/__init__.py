"""Load lane: latency, percentile and CPU-time checks (`make test-load`; not part of `make test`)."""
