"""The pure core: plain data in, plain data out. No I/O, no API client imports."""
