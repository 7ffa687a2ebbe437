"""voxpool protos package."""
