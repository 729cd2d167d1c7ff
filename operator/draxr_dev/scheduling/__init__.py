"""Scheduling differential test support: case generator, Go harness runner, draxr's evaluation."""
