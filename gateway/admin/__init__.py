"""Operating a node: health, readiness, Prometheus metrics, stats, pins and purges (admin API), and the CLI's client of it."""
