"""voxpool tests.models package."""
