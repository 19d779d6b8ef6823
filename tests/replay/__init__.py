"""Recorded histories replayed headless (studio ``dcstudio replay``)."""
