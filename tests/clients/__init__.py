"""voxpool tests.clients package."""
