"""Optional integrations with third-party libraries, each loaded lazily."""
