"""voxpool tests.bench package: tests of the benchmarks and load generators in bench/."""
