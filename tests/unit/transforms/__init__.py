"""Unit tests for the transforms package."""
