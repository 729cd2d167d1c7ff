"""The pure core: plain data in, plain data out. No I/O, no kopf, no API client imports."""
