"""Models: distributions, bijectors and LogDensity, for samplers."""
