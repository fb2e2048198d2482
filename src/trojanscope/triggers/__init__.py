"""triggers package."""
