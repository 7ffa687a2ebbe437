"""voxpool models.frontend package."""
