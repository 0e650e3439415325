"""What a benchmark produced: metrics, measurements, saved runs and their artifacts."""
