"""What profiling raises when its caller cancels it (the recording of a cutout, or the timed worker)."""


class ProfileCancelled(Exception):
    """The caller cancelled profiling; the worker was killed."""
