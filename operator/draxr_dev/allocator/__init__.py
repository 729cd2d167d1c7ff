"""Allocation cases for the golden, property and differential tests: object builders, the seeded
case generator and the runner that feeds a case to draxr's allocator."""
