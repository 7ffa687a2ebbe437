"""The `voxpool` command (serve, say, bench, normalize, voices): the top of the import graph, over every package."""
