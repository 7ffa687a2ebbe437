"""voxpool models.voices package."""
