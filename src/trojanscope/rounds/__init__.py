"""rounds package."""
