"""draxr's developer tooling: the local control plane and fake driver (``devcluster``) and the
allocator's case generators (``allocator``). Used by tests, benchmarks and the demo; left out of the
runtime wheel and the image. Imports point from here to ``draxr``, never back."""
