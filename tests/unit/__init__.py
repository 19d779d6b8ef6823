"""Unit tests, one file per source file, in folders mirroring the packages."""
